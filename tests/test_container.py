"""The container image: tools/container-build.sh builds it (podman here, with runc; from a Debian
base of its own when no registry can be reached), and it runs as it says: the server as a non-root
entrypoint taking our arguments, answering namesrv-admin (a simulated broker registered), /readyz
and its own HEALTHCHECK.

Needs podman (or docker with a daemon): skipped without one, failed instead in CI (CI=true),
where tools/test.sh installs podman.  Takes about 40 s with a base image present, two minutes
from nothing (the base built once with debootstrap)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest

from tests.support import free_port

REPO = Path(__file__).resolve().parents[1]
BUILD_TIMEOUT = 600
READY_WITHIN = 30  # seconds from `run` to a 200 from /readyz before the test fails

pytestmark = pytest.mark.container


def engine_env() -> tuple[str, dict[str, str]]:
    """The engine tools/container-engine.sh picks, and CONTAINERS_CONF as it sets it."""
    script = f'source {REPO}/tools/container-engine.sh && pick_engine && echo "$engine ${{CONTAINERS_CONF:-}}"'
    found = subprocess.run(["bash", "-c", script], capture_output=True, text=True)
    if found.returncode != 0 or shutil.which("bash") is None:
        message = f"no container engine: {found.stderr.strip()}"
        if os.environ.get("CI") == "true":
            pytest.fail(message + " (CI: tools/test.sh installs podman)")
        pytest.skip(message)
    engine, _, conf = found.stdout.strip().partition(" ")
    env = dict(os.environ)
    if conf:
        env["CONTAINERS_CONF"] = conf
    return engine, env


@pytest.fixture(scope="module")
def image() -> tuple[str, str, dict[str, str]]:
    engine, env = engine_env()
    built = subprocess.run([str(REPO / "tools/container-build.sh")], capture_output=True, text=True, env=env,
                           timeout=BUILD_TIMEOUT)
    assert built.returncode == 0, built.stderr[-4000:]
    name = built.stdout.strip().splitlines()[-1]
    assert name.startswith("localhost/twisted-namesrv:"), built.stdout
    return engine, name, env


def http_get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=2) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def first_200(url: str) -> tuple[int, bytes]:
    """The first 200 answer from ``url`` within READY_WITHIN seconds of a container's start, else the last."""
    deadline, answer = time.monotonic() + READY_WITHIN, (0, b"")
    while time.monotonic() < deadline and answer[0] != 200:
        try:
            answer = http_get(url)
        except OSError:
            time.sleep(0.2)
    return answer


@contextlib.contextmanager
def ready_container(image: tuple[str, str, dict[str, str]], prefix: str, *options: str):
    """The image run on the host's network with ``options`` (before the image), on free ports, until
    /readyz answers 200; yields (container, remoting port, HTTP port, /readyz's answer, logs); removed after."""
    engine, name, env = image
    port, http = free_port(), free_port()
    container = f"{prefix}-{uuid.uuid4().hex[:8]}"
    run = [engine, "run", "-d", "--name", container, "--network", "host", *options, "-e", f"NAMESRV_HTTP_PORT={http}",
           name, "--port", str(port), "--metrics-port", str(http), "--bind", "127.0.0.1"]
    started = subprocess.run(run, capture_output=True, text=True, env=env, timeout=60)
    assert started.returncode == 0, started.stderr
    try:
        ready = first_200(f"http://127.0.0.1:{http}/readyz")
        logs = subprocess.run([engine, "logs", container], capture_output=True, text=True, env=env).stdout
        assert ready[0] == 200, f"/readyz: {ready}\n{logs}"
        yield container, port, http, ready, logs
    finally:
        subprocess.run([engine, "rm", "-f", "-v", "-t", "2", container], capture_output=True, env=env, timeout=60)


def test_the_image_serves_as_non_root_and_answers_admin_probes_and_its_health_check(image, tmp_path):
    engine, name, env = image
    with ready_container(image, "namesrv-test") as (container, port, http, ready, logs):
        assert json.loads(ready[1])["failing"] == []
        assert "The Name Server boot success" in logs

        admin = str(REPO / ".venv/bin/namesrv-admin")
        broker = subprocess.Popen([admin, "-n", f"127.0.0.1:{port}", "simulate-broker", "--interval", "30"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            registered = broker.stdout.readline()
            assert registered.startswith("registered DefaultCluster/broker-a"), registered + broker.stderr.read()
            listed = subprocess.run([admin, "-n", f"127.0.0.1:{port}", "clusterList"], capture_output=True, text=True,
                                    timeout=30)
            assert listed.returncode == 0, listed.stdout + listed.stderr
            assert listed.stdout.split()[-3:] == ["broker-a", "0", "127.0.0.1:10911"], listed.stdout
        finally:
            broker.terminate()  # SIGTERM: it unregisters, then exits 0
            out, err = broker.communicate(timeout=30)
        assert broker.returncode == 0 and f"unregistered broker-a from 127.0.0.1:{port}" in out, out + err
        assert http_get(f"http://127.0.0.1:{http}/rocketmq/nsaddr") == (200, f"127.0.0.1:{port}".encode())

        uid = subprocess.run([engine, "exec", container, "id", "-u"], capture_output=True, text=True, env=env)
        assert uid.returncode == 0 and uid.stdout.strip() not in ("", "0"), uid
        top = subprocess.run([engine, "top", container, "user", "args"], capture_output=True, text=True, env=env)
        assert "twisted-namesrv" in top.stdout and "root" not in top.stdout, top.stdout
        if engine == "podman":
            health = subprocess.run([engine, "healthcheck", "run", container], capture_output=True, text=True,
                                    env=env, timeout=30)
            assert health.returncode == 0, health.stdout + health.stderr


def test_arguments_pass_through_and_a_usage_error_exits_non_zero(image):
    engine, name, env = image
    printed = subprocess.run([engine, "run", "--rm", name, "-p", "--compat", "4.9.8"], capture_output=True,
                             text=True, env=env, timeout=60)
    assert printed.returncode == 0, printed.stderr
    assert "compatVersion=4.9.8" in printed.stdout and "kvConfigPath=/var/lib/namesrv/kvConfig.json" in printed.stdout
    refused = subprocess.run([engine, "run", "--rm", name, "--port", "abc"], capture_output=True, text=True,
                             env=env, timeout=60)
    assert refused.returncode == 2 and "--port" in refused.stderr, refused


def documented(page: str, start: str) -> str:
    """The first line of a page's sh blocks that starts with ``start`` (continuations joined)."""
    from tests.test_docs_commands import FENCE, logical_lines

    text = (REPO / page).read_text(encoding="utf-8")
    lines = [line for lang, block in FENCE.findall(text) if lang == "sh" for line in logical_lines(block, False)]
    return next(line for line in lines if line.startswith(start))


@pytest.mark.skipif(shutil.which("unshare") is None or os.geteuid() != 0,
                    reason="the documented ports, in a network namespace of its own: needs root and unshare")
def test_the_documented_podman_commands_work_as_printed(image):
    """docs/deploy.md's `podman run` and the README's, with podman's own configuration (no
    CONTAINERS_CONF: tools/setup-env.sh --container wrote what this machine needs), the ports they
    print (free in a network namespace of its own); only the container's and volume's names are made
    unique so that parallel runs do not meet. Then the lines the docs give to check it."""
    engine, name, env = image
    if engine != "podman":
        pytest.skip("the docs print podman commands")
    env = {k: v for k, v in env.items() if k != "CONTAINERS_CONF"}
    env["PATH"] = f"{REPO / '.venv/bin'}:{env['PATH']}"
    unique = uuid.uuid4().hex[:8]
    deploy_run = documented("docs/deploy.md", "podman run -d --name namesrv ")
    readme_run = re.search(r"# or: (podman run .*)$", (REPO / "README.md").read_text(), re.M).group(1).strip()
    assert deploy_run.endswith(name) and readme_run.endswith(name)
    deploy_run = deploy_run.replace("--name namesrv ", f"--name ns-{unique} ").replace(
        "namesrv-data:", f"namesrv-data-{unique}:")
    check = documented("docs/deploy.md", "namesrv-admin clusterList")
    script = f"""
ip link set lo up
{deploy_run}
for i in $(seq 150); do curl -fsS -o /dev/null 127.0.0.1:9877/readyz 2>/dev/null && break; sleep 0.2; done
{check}
echo "status page from the host: $(curl -s -o /dev/null -w '%{{http_code}}' 127.0.0.1:9877/)"
podman rm -f -t 2 ns-{unique} >/dev/null; podman volume rm -f namesrv-data-{unique} >/dev/null
podman run -d --name ns-host-{unique} {readme_run.removeprefix('podman run ')}
for i in $(seq 150); do curl -fsS -o /dev/null 127.0.0.1:9877/readyz 2>/dev/null && break; sleep 0.2; done
echo "status page with --network host: $(curl -s -o /dev/null -w '%{{http_code}}' 127.0.0.1:9877/)"
podman rm -f -t 2 ns-host-{unique} >/dev/null
"""
    done = subprocess.run(["unshare", "-n", "bash", "-c", script], capture_output=True, text=True, env=env,
                          timeout=240)
    out = done.stdout
    assert "#Cluster Name" in out and '"failing": []' in out, out + done.stderr  # clusterList, then /readyz
    assert "status page from the host: 403" in out, out  # published ports: the public paths only
    assert "status page with --network host: 200" in out, out + done.stderr  # a loopback peer sees the page


def test_the_address_server_answers_the_advertised_address_to_clients_outside_the_container(image):
    """On podman's bridge network the server sees the container's own IP: without an advertised
    address /rocketmq/nsaddr answers that (unreachable from outside); with NAMESRV_ADVERTISED_ADDRESS
    (a manifest sets it from the pod IP or the Service name) it answers what clients reach."""
    engine, name, env = image
    http = free_port()
    answers = {}
    for advertised in ("", "127.0.0.1:19876"):
        container = f"namesrv-nsaddr-{uuid.uuid4().hex[:8]}"
        run = [engine, "run", "-d", "--name", container, "-p", f"127.0.0.1:{http}:9877",
               *(["-e", f"NAMESRV_ADVERTISED_ADDRESS={advertised}"] if advertised else []), name,
               "--port", "9876", "--metrics-port", "9877", "--bind", "0.0.0.0", "--metrics-bind", "0.0.0.0"]
        started = subprocess.run(run, capture_output=True, text=True, env=env, timeout=60)
        if started.returncode != 0 and "network" in started.stderr.lower():
            pytest.skip(f"no bridge network for containers here: {started.stderr.strip()[-300:]}")
        assert started.returncode == 0, started.stderr
        try:
            answers[advertised] = first_200(f"http://127.0.0.1:{http}/rocketmq/nsaddr")
        finally:
            subprocess.run([engine, "rm", "-f", "-t", "2", container], capture_output=True, env=env, timeout=60)
    status, inside = answers[""]
    assert status == 200 and not inside.startswith(b"127.0.0.1:"), inside  # the container's own address
    assert answers["127.0.0.1:19876"] == (200, b"127.0.0.1:19876")


def test_the_image_runs_and_keeps_its_state_under_an_arbitrary_uid_of_group_0(image):
    """OpenShift's restricted policy runs every container as an arbitrary uid of group 0, as `podman
    run --user UID` and `docker run -u UID` do: the image's data directory is group 0's to write too,
    so the server starts (it refuses a data directory it cannot write in) and its KV store is saved
    there, in the volume the image declares."""
    engine, _, env = image
    with ready_container(image, "namesrv-uid", "--user", "1000680000:0") as (container, port, _, _, _):
        admin = str(REPO / ".venv/bin/namesrv-admin")
        put = subprocess.run([admin, "-n", f"127.0.0.1:{port}", "updateKvConfig", "-s", "ORDER_TOPIC_CONFIG",
                              "-k", "orders", "-v", "broker-a:4"], capture_output=True, text=True, timeout=30)
        assert put.returncode == 0, put.stdout + put.stderr
        saved = subprocess.run([engine, "exec", container, "cat", "/var/lib/namesrv/kvConfig.json"],
                               capture_output=True, text=True, env=env, timeout=30)
        assert saved.returncode == 0 and "broker-a:4" in saved.stdout, saved
        uid = subprocess.run([engine, "exec", container, "id", "-u"], capture_output=True, text=True, env=env)
        assert uid.stdout.strip() == "1000680000", uid


def test_a_restart_under_another_uid_of_group_0_locks_and_writes_on_the_state_the_last_one_left(image):
    """OpenShift runs the image under an arbitrary uid of group 0, another at every redeploy: the
    volume the image's own uid (10001:0) wrote, a server under uid 1000680000:0 locks (no "is not
    locked" warning: the lock file is 0664, NAMESRV_UMASK=0002), serves the KV config saved before
    and saves its own changes."""
    engine, _, env = image
    volume = f"namesrv-uids-{uuid.uuid4().hex[:8]}"
    admin = str(REPO / ".venv/bin/namesrv-admin")
    mount = ("-v", f"{volume}:/var/lib/namesrv")

    def kv(port: int, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([admin, "-n", f"127.0.0.1:{port}", *args], capture_output=True, text=True, timeout=30)

    def inside(container: str, *command: str) -> str:
        done = subprocess.run([engine, "exec", container, *command], capture_output=True, text=True, env=env,
                              timeout=30)
        assert done.returncode == 0, done
        return done.stdout

    try:
        with ready_container(image, "namesrv-uid-a", *mount) as (container, port, _, _, logs):
            assert inside(container, "id", "-u").strip() == "10001" and inside(container, "id", "-g").strip() == "0"
            put = kv(port, "updateKvConfig", "-s", "ORDER_TOPIC_CONFIG", "-k", "orders", "-v", "broker-a:4")
            assert put.returncode == 0, put.stdout + put.stderr
        with ready_container(image, "namesrv-uid-b", "--user", "1000680000:0", *mount) as (container, port, _, _,
                                                                                            logs):
            assert "is not locked" not in logs, logs
            got = kv(port, "getKvConfig", "-s", "ORDER_TOPIC_CONFIG", "-k", "orders")
            assert got.returncode == 0 and "broker-a:4" in got.stdout, got.stdout + got.stderr
            put = kv(port, "updateKvConfig", "-s", "ORDER_TOPIC_CONFIG", "-k", "payments", "-v", "broker-b:2")
            assert put.returncode == 0, put.stdout + put.stderr
            saved = inside(container, "cat", "/var/lib/namesrv/kvConfig.json")
            assert "broker-a:4" in saved and "broker-b:2" in saved, saved
            modes = inside(container, "stat", "-c", "%n %a %g", "/var/lib/namesrv/namesrv.lock",
                           "/var/lib/namesrv/kvConfig.json").split("\n")
            assert modes[:2] == ["/var/lib/namesrv/namesrv.lock 664 0", "/var/lib/namesrv/kvConfig.json 664 0"], modes
    finally:
        subprocess.run([engine, "volume", "rm", "-f", volume], capture_output=True, env=env, timeout=60)
