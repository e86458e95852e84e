"""deploy/kubernetes/namesrv.yaml against the server it deploys: the options and the ConfigMap's
keys are ones the server takes, the ports it listens on are the ones the pod, the Service and the
probes use, the probe paths are served, and the image's user, volume and ports are the manifest's."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from twisted_namesrv import __version__, tap
from twisted_namesrv.service import NamesrvService

REPO = Path(__file__).resolve().parents[1]
MANIFEST = REPO / "deploy" / "kubernetes" / "namesrv.yaml"


@pytest.fixture(scope="module")
def docs() -> dict[str, dict]:
    return {doc["kind"]: doc for doc in yaml.safe_load_all(MANIFEST.read_text())}


def pod(docs) -> dict:
    return docs["StatefulSet"]["spec"]["template"]["spec"]


def container(docs) -> dict:
    (only,) = pod(docs)["containers"]
    return only


def options_as_deployed(docs, tmp_path) -> tap.Options:
    """The container's arguments parsed by the server itself, with the ConfigMap where it is mounted."""
    mounts = {m["name"]: m["mountPath"] for m in container(docs)["volumeMounts"]}
    (properties,) = docs["ConfigMap"]["data"].items()
    mounted = tmp_path / properties[0]
    data_dir = tmp_path / "data"
    mounted.write_text(properties[1].replace(mounts["data"], str(data_dir)))  # routeSnapshotPath in the volume
    args = [str(mounted) if a == f"{mounts['config']}/{properties[0]}" else
            str(data_dir) if a == mounts["data"] else a for a in container(docs)["args"]]
    assert str(mounted) in args and str(data_dir) in args, "the args name the mounted ConfigMap and the data volume"
    options = tap.Options()
    options.parseOptions([*args, "--strict-config"])  # a key no NameServer setting has is refused
    return options


def test_the_server_takes_the_manifests_options_and_keys(docs, tmp_path):
    config = options_as_deployed(docs, tmp_path).config
    assert config["bindAddress"] == "0.0.0.0"  # reachable on the pod's address
    assert config["metricsPort"], "the probes need the HTTP port"
    assert container(docs)["command"] == ["/opt/namesrv/bin/twisted-namesrv"]


def test_ports_agree_between_server_pod_service_and_probes(docs, tmp_path):
    config = options_as_deployed(docs, tmp_path).config
    ports = {p["name"]: p["containerPort"] for p in container(docs)["ports"]}
    assert ports == {"remoting": config["listenPort"], "http": config["metricsPort"]}
    service = docs["Service"]["spec"]
    assert service["clusterIP"] == "None"
    assert {p["name"]: (p["port"], p["targetPort"]) for p in service["ports"]} == {
        "remoting": (config["listenPort"], "remoting"), "http": (config["metricsPort"], "http")}
    for probe in ("readinessProbe", "livenessProbe"):
        assert container(docs)[probe]["httpGet"]["port"] in ports


def test_probe_paths_are_served_by_the_http_port(docs, tmp_path):
    options = options_as_deployed(docs, tmp_path)
    service = NamesrvService(options.config)
    served = {b"/" + name for name in service.http_resources()}
    assert container(docs)["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container(docs)["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert {b"/readyz", b"/healthz"} <= served


def test_nsaddr_list_names_every_replica_by_its_stable_name(docs, tmp_path):
    config = options_as_deployed(docs, tmp_path).config
    statefulset = docs["StatefulSet"]
    name, service = statefulset["metadata"]["name"], statefulset["spec"]["serviceName"]
    assert service == docs["Service"]["metadata"]["name"]
    expected = [f"{name}-{i}.{service}:{config['listenPort']}" for i in range(statefulset["spec"]["replicas"])]
    assert config["nsaddrList"].split(";") == expected


def test_selectors_budget_and_security_match(docs):
    labels = docs["StatefulSet"]["spec"]["template"]["metadata"]["labels"]
    for kind in ("StatefulSet", "PodDisruptionBudget"):
        assert docs[kind]["spec"]["selector"]["matchLabels"].items() <= labels.items(), kind
    assert docs["Service"]["spec"]["selector"].items() <= labels.items()
    assert docs["PodDisruptionBudget"]["spec"]["maxUnavailable"] < docs["StatefulSet"]["spec"]["replicas"]
    assert pod(docs)["securityContext"]["runAsNonRoot"] is True


def test_the_image_matches_the_manifest(docs):
    """Containerfile: the user the pod runs as, the data volume it mounts, the ports it exposes."""
    containerfile = (REPO / "Containerfile").read_text()
    user = re.search(r"^USER (\d+):(\d+)$", containerfile, re.M)
    assert user and int(user.group(1)) == pod(docs)["securityContext"]["runAsUser"]
    volume = re.search(r"^VOLUME (\S+)$", containerfile, re.M)
    mounts = {m["name"]: m["mountPath"] for m in container(docs)["volumeMounts"]}
    assert volume and volume.group(1) == mounts["data"]
    exposed = re.search(r"^EXPOSE (.*)$", containerfile, re.M)
    assert exposed and sorted(map(int, exposed.group(1).split())) == sorted(
        p["containerPort"] for p in container(docs)["ports"])
    assert container(docs)["image"] == f"twisted-namesrv:{__version__}"  # what tools/container-build.sh tags


def http_bind(config) -> str:
    """Where the HTTP side (probes, metrics, address server) listens: ``metricsBindAddress`` where the
    server has that key, else ``bindAddress`` as the remoting port."""
    return config.values.get("metricsBindAddress", config["bindAddress"])


def test_kubelet_probes_can_reach_the_http_port(docs, tmp_path):
    """A probe comes from outside the pod: the HTTP side must listen on every interface."""
    assert http_bind(options_as_deployed(docs, tmp_path).config) in ("0.0.0.0", "::")


def test_the_images_entrypoint_serves_remoting_and_http_on_every_interface(tmp_path):
    containerfile = (REPO / "Containerfile").read_text()
    entrypoint = json.loads(re.search(r"^ENTRYPOINT (\[.*\])$", containerfile, re.M).group(1))
    assert entrypoint[0] == "/opt/namesrv/bin/twisted-namesrv"
    args = [str(tmp_path) if a == "/var/lib/namesrv" else a for a in entrypoint[1:]]
    options = tap.Options()
    options.parseOptions(args)
    config = options.config
    assert config["bindAddress"] == "0.0.0.0" and http_bind(config) in ("0.0.0.0", "::")
    assert config["metricsPort"] == int(re.search(r"NAMESRV_HTTP_PORT=(\d+)", containerfile).group(1))
