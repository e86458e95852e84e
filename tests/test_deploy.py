"""deploy/kubernetes/namesrv.yaml against the server it deploys: the options and the ConfigMap's
keys are ones the server takes, the ports it listens on are the ones the pod, the Service and the
probes use, the probe paths are served, and the image's user, volume and ports are the manifest's;
against Kubernetes: Pod Security "restricted", the NetworkPolicy and the scrape configuration, the
schemas (kubernetes-validate) and a policy scanner (checkov), both run offline from .venv-deploy
(tools/setup-env.sh --deploy)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from twisted_namesrv import __version__, tap
from twisted_namesrv.service import NamesrvService

REPO = Path(__file__).resolve().parents[1]
MANIFEST = REPO / "deploy" / "kubernetes" / "namesrv.yaml"
SERVICE_MONITOR = REPO / "deploy" / "kubernetes" / "servicemonitor.yaml"
#: checkov's checks this manifest does not follow, and why (each is a choice, not an oversight)
CHECKOV_SKIPS = {
    "CKV_K8S_21": "the namespace is chosen at apply time (kubectl apply -n NAMESPACE)",
    "CKV_K8S_43": "a digest exists only once the operator pushes the image; the tag is the release's version",
    "CKV_K8S_15": "IfNotPresent: a version's tag never changes, and nodes without a registry still start it",
}


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
    service = NamesrvService.from_config(options.config)
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
    assert container(docs)["image"] == f"localhost/twisted-namesrv:{__version__}"  # what container-build.sh tags
    build = (REPO / "tools" / "container-build.sh").read_text()
    assert "tag=${tag:-localhost/twisted-namesrv:$version}" in build


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
    args = [a.replace("/var/lib/namesrv", str(tmp_path)) for a in entrypoint[1:]]
    options = tap.Options()
    options.parseOptions(args)
    config = options.config
    assert config["bindAddress"] == "0.0.0.0" and http_bind(config) in ("0.0.0.0", "::")
    assert config["metricsPort"] == int(re.search(r"NAMESRV_HTTP_PORT=(\d+)", containerfile).group(1))
    # a restarted NameServer answers routes at once, as the systemd unit's and the manifest's do
    assert config["routeSnapshotPath"] == str(tmp_path / "routes.json")


def test_the_pod_meets_pod_security_restricted(docs):
    """The restricted profile's rules, as the admission controller checks them (pod and container)."""
    spec = pod(docs)
    assert spec["automountServiceAccountToken"] is False
    assert not any(spec.get(key) for key in ("hostNetwork", "hostPID", "hostIPC"))
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert spec["securityContext"]["runAsNonRoot"] is True and spec["securityContext"]["runAsUser"] != 0
    for volume in spec["volumes"]:
        assert set(volume) - {"name"} <= {"configMap", "secret", "emptyDir", "persistentVolumeClaim", "projected"}
    for each in spec["containers"] + spec.get("initContainers", []):
        context = each["securityContext"]
        assert context["runAsNonRoot"] is True and context["allowPrivilegeEscalation"] is False
        assert context.get("privileged") is not True
        assert context["capabilities"] == {"drop": ["ALL"]}
        assert context["seccompProfile"] == {"type": "RuntimeDefault"}
        assert not any("hostPort" in port for port in each["ports"])
        registry, _, rest = each["image"].partition("/")
        assert ("." in registry or ":" in registry or registry == "localhost") and ":" in rest  # registry/name:tag


def test_the_network_policy_lets_in_brokers_clients_and_prometheus_only(docs):
    policy = docs["NetworkPolicy"]["spec"]
    assert policy["podSelector"]["matchLabels"].items() <= docs["StatefulSet"]["spec"]["template"]["metadata"][
        "labels"].items()
    assert policy["policyTypes"] == ["Ingress"]
    by_port = {rule["ports"][0]["port"]: rule for rule in policy["ingress"]}
    assert set(by_port) == {"remoting", "http"} and all(len(rule["ports"]) == 1 for rule in policy["ingress"])
    assert "from" not in by_port["remoting"]  # brokers and clients, from anywhere
    sources = by_port["http"]["from"]
    assert {"app.kubernetes.io/name": "prometheus"} in [s["podSelector"]["matchLabels"] for s in sources]
    assert all(s.get("podSelector") or s.get("namespaceSelector") for s in sources)  # never the whole world


def test_prometheus_finds_the_metrics_port(docs):
    annotations = docs["StatefulSet"]["spec"]["template"]["metadata"]["annotations"]
    ports = {p["name"]: p["containerPort"] for p in container(docs)["ports"]}
    assert annotations["prometheus.io/scrape"] == "true" and annotations["prometheus.io/path"] == "/metrics"
    assert int(annotations["prometheus.io/port"]) == ports["http"]
    monitor = yaml.safe_load(SERVICE_MONITOR.read_text())
    assert monitor["kind"] == "ServiceMonitor"
    assert monitor["spec"]["selector"]["matchLabels"].items() <= docs["Service"]["metadata"]["labels"].items()
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] in {p["name"] for p in docs["Service"]["spec"]["ports"]}
    assert endpoint["path"] == "/metrics"


def deploy_tool(name: str) -> str:
    """A checker tools/setup-env.sh --deploy installs (skipped without it; failed in CI)."""
    found = REPO / ".venv-deploy" / "bin" / name
    if found.exists():
        return str(found)
    if shutil.which(name):
        return shutil.which(name)
    if os.environ.get("CI"):
        pytest.fail(f"{name} missing: tools/setup-env.sh --deploy installs it (tools/test.sh does)")
    pytest.skip(f"{name} missing: tools/setup-env.sh --deploy installs it")


def run_checker(argv: list[str]) -> subprocess.CompletedProcess:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=REPO)
    if not argv[0].endswith("checkov"):
        print(done.stdout[-3000:], done.stderr[-3000:], sep="\n")  # the CI log shows what the checker said
    return done


def test_kubernetes_validate_accepts_the_manifests():
    """Strict: a field Kubernetes does not know fails too. The ServiceMonitor is a custom resource whose
    schema the validator does not carry: only its shape is checked (test above)."""
    done = run_checker([deploy_tool("kubernetes-validate"), "--strict", str(MANIFEST)])
    assert done.returncode == 0
    kinds = {doc["kind"].lower() for doc in yaml.safe_load_all(MANIFEST.read_text())}
    assert {m.lower() for m in re.findall(r" passed for resource (\w+)/", done.stdout)} == kinds


def test_checkov_finds_nothing_but_the_choices_named_here():
    done = run_checker([deploy_tool("checkov"), "--directory", str(MANIFEST.parent), "--framework", "kubernetes",
                        "--skip-download", "--output", "json",
                        "--skip-check", ",".join(CHECKOV_SKIPS)])
    report = json.loads(done.stdout)
    summary = report["summary"]
    failed = [(c["check_id"], c["resource"]) for c in report["results"]["failed_checks"]]
    print(f"checkov {summary['checkov_version']}: passed {summary['passed']}, failed {summary['failed']}, "
          f"not run: {', '.join(CHECKOV_SKIPS)}; resources {summary['resource_count']}")
    assert failed == [] and done.returncode == 0
    assert summary["passed"] >= 80 and summary["parsing_errors"] == 0
    passed = {c["check_id"] for c in report["results"]["passed_checks"]}
    # the restricted profile's own checks are among those that passed
    assert {"CKV_K8S_20", "CKV_K8S_28", "CKV_K8S_31", "CKV_K8S_37", "CKV_K8S_38", "CKV2_K8S_6"} <= passed


def test_as_deployed_only_the_public_paths_answer_beyond_the_pod(docs, tmp_path):
    """The ConfigMap opens the HTTP side on every interface for the probes and the scrape; a peer that
    is not loopback (another pod, a node) reaches /metrics, the probes and the address server only."""
    from twisted.internet.address import IPv4Address
    from twisted.web.test.requesthelper import DummyRequest

    from twisted_namesrv.web.auth import Refusal
    from twisted_namesrv.web.site import make_site

    config = options_as_deployed(docs, tmp_path).config
    assert not config["aclEnable"]
    service = NamesrvService.from_config(config)
    site = make_site(service.state, service.factory, service.seen, service.http_resources())

    def resource_for(path: str, peer: str, host: str | None = None, local: str = "127.0.0.1"):
        request = DummyRequest([part.encode() for part in path.strip("/").split("/")])
        request.path = path.encode()
        request.client = IPv4Address("TCP", peer, 40000)
        request.getHost = lambda: IPv4Address("TCP", local, config["metricsPort"])
        if host is not None:
            request.requestHeaders.setRawHeaders(b"host", [host.encode()])
        return site.getResourceFor(request)

    for path in ("/metrics", "/healthz", "/readyz", "/rocketmq/nsaddr"):
        assert not isinstance(resource_for(path, "10.1.2.3"), Refusal), path
    for path in ("/", "/api/overview", "/api/kv"):
        refused = resource_for(path, "10.1.2.3")
        assert isinstance(refused, Refusal) and refused.status == 403, path
        assert not isinstance(resource_for(path, "127.0.0.1"), Refusal), path  # kubectl port-forward
    # the Host each sends (DNS rebinding: a Host naming neither this pod nor a configured name is refused)
    pod_ip, http = "10.244.1.7", config["metricsPort"]
    for path in ("/healthz", "/readyz", "/metrics"):  # the kubelet and a pod scrape: POD_IP:PORT, reached there
        assert not isinstance(resource_for(path, "10.244.1.1", f"{pod_ip}:{http}", local=pod_ip), Refusal), path
    service_name = docs["Service"]["metadata"]["name"]
    for host in (f"{service_name}:{http}", f"{service_name}-1.{service_name}:{http}"):  # address-server clients
        assert not isinstance(resource_for("/rocketmq/nsaddr", "10.244.2.9", host, local=pod_ip), Refusal), host
    for path in ("/metrics", "/rocketmq/nsaddr", "/api/kv"):
        refused = resource_for(path, "127.0.0.1", f"attacker.example:{http}")  # rebound to the pod or loopback
        assert isinstance(refused, Refusal) and refused.status == 403, path
    assert not isinstance(resource_for("/api/kv", "127.0.0.1", "localhost:8080"), Refusal)  # port-forward
