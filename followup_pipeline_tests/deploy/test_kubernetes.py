"""The Kubernetes files (``deploy/helm/``, ``deploy/k8s/``) agree with Dagster's chart and with
the code they deploy. Fast: no network, no database, no cluster.

``deploy/helm/values.schema.json`` is the chart's own schema, copied byte for byte from
github.com/dagster-io/dagster, path ``helm/dagster/values.schema.json``, commit
2bdb239558bfe98dc2a89e2e0c2f3f849367fdd4. That is the newest version that could be fetched, not
the tag 1.13.27 itself (the chart version pinned with Dagster): it has one known addition, a
top-level ``ui`` block (label and intent) that Dagster 1.13.27 does not have. Replace it with the
tag's file when that can be had. It holds the user deployments' schema too (``$defs``
``UserDeployments``), so the subchart's own schema is not copied.

Helm checks the chart's default values merged with ours, and those defaults are not here, so the
schema is applied without its ``required`` lists. Lists are not merged but replaced whole, so
each code location and each tag limit is checked with them.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from jsonschema import Draft202012Validator
from jsonschema.protocols import Validator
from jsonschema.validators import validator_for
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012
from starlette.routing import Route

from followup_pipeline.cli import build_parser
from followup_pipeline.ingress.app import create_app
from followup_pipeline.machine import LOCATION, MODULE
from followup_pipeline.settings import ENV_PREFIX, Settings

ROOT = Path(__file__).resolve().parents[2]
HELM = ROOT / "deploy" / "helm"
K8S = ROOT / "deploy" / "k8s"
#: The copied schema's SHA-256: the file is Dagster's, byte for byte, and is not edited here.
SCHEMA_SHA256 = "6d9aadb17881f23a96cdc0df89e3c4a5aa65e5b4a010b2eada443f6884c27ee1"
#: The Secret that holds the machine's ``FOLLOWUP_*`` secrets.
SECRET = "followup-secrets"
#: Read directly by ``load_settings``, not a field of ``Settings``.
SECRETS_DIR = f"{ENV_PREFIX}SECRETS_DIR"
#: The ingress listens on every interface of its pod: its Service is the only way in.
EVERY_INTERFACE = "0.0.0.0"  # noqa: S104
#: The port the ingress serves on by default (``FOLLOWUP_INGRESS_PORT``).
INGRESS_PORT: int = Settings.model_fields["ingress_port"].default
#: The tag limits of the chart's ``concurrency.runs`` (not those of the run coordinator).
TAG_LIMIT = "schema__charts__dagster__subschema__concurrency__TagConcurrencyLimit"


def read_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


@functools.cache
def schema() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((HELM / "values.schema.json").read_text(encoding="utf-8"))
    return loaded


def values() -> dict[str, Any]:
    """A fresh copy each time: a test may break it."""
    loaded: dict[str, Any] = read_yaml(HELM / "values.yaml")
    return loaded


def dagster_yaml() -> dict[str, Any]:
    """The repository's instance, read again each time: it may change while the suite runs."""
    loaded: dict[str, Any] = read_yaml(ROOT / "dagster.yaml")
    return loaded


@functools.cache
def manifests() -> dict[str, dict[str, Any]]:
    """The objects of ``deploy/k8s/ingress.yaml`` by kind (one of each)."""
    text = (K8S / "ingress.yaml").read_text(encoding="utf-8")
    documents = [doc for doc in yaml.safe_load_all(text) if doc]
    by_kind = {doc["kind"]: doc for doc in documents}
    assert len(by_kind) == len(documents), "one object of each kind"
    return by_kind


def ingress_container() -> dict[str, Any]:
    (container,) = manifests()["Deployment"]["spec"]["template"]["spec"]["containers"]
    return dict(container)


def code_location() -> dict[str, Any]:
    (deployment,) = values()["dagster-user-deployments"]["deployments"]
    return dict(deployment)


def at(tree: Any, path: str) -> Any:
    """The value at a dotted path (``a.b.0.c``)."""
    for part in path.split("."):
        tree = tree[int(part)] if isinstance(tree, list) else tree[part]
    return tree


def _outside_refs(node: Any) -> set[str]:
    if isinstance(node, dict):
        found = {node["$ref"]} if isinstance(node.get("$ref"), str) else set()
        return found.union(*(_outside_refs(v) for v in node.values()))
    if isinstance(node, list):
        return set().union(*(_outside_refs(v) for v in node))
    return set()


@functools.cache
def registry() -> Registry:
    """The Kubernetes definitions the schema points at are on the web (Helm fetches them): here
    each pointer answers with an empty schema, which accepts anything. So the shapes of
    Kubernetes objects (probes, resources, env sources) are not checked; the chart's are."""
    documents: dict[str, dict[str, Any]] = {}
    for ref in _outside_refs(schema()):
        uri, _, pointer = ref.partition("#")
        if not uri:
            continue  # within the schema
        node = documents.setdefault(uri, {})
        for part in pointer.strip("/").split("/"):
            node = node.setdefault(part.replace("~1", "/").replace("~0", "~"), {})
    resources = [
        (uri, Resource.from_contents(doc, default_specification=DRAFT202012))
        for uri, doc in documents.items()
    ]
    return Registry().with_resources(resources)


def validator_class() -> type[Validator]:
    """The draft the schema declares; it declares none, and pydantic 2 (which generated it)
    writes Draft 2020-12, hence that default."""
    cls: type[Validator] = validator_for(schema(), default=Draft202012Validator)
    return cls


def without_required(node: Any, parent: str | None = None) -> Any:
    """``node`` without its ``required`` lists (a property called ``required`` stays)."""
    if isinstance(node, dict):
        return {
            key: without_required(value, key)
            for key, value in node.items()
            if key != "required" or parent == "properties"
        }
    if isinstance(node, list):
        return [without_required(item, parent) for item in node]
    return node


def errors(instance: Any, against: dict[str, Any]) -> list[str]:
    validator = validator_class()(against, registry=registry())
    return [
        f"{'.'.join(map(str, error.absolute_path)) or '(top)'}: {error.message}"
        for error in validator.iter_errors(instance)
    ]


def merged_values_errors(instance: Any) -> list[str]:
    """The errors Helm would report once the chart's defaults filled in what is missing."""
    return errors(instance, without_required(schema()))


def definition_errors(instance: Any, definition: str) -> list[str]:
    """The errors of one list item against its definition, ``required`` included."""
    return errors(instance, {"$defs": schema()["$defs"], "$ref": f"#/$defs/{definition}"})


# --- the chart's schema ------------------------------------------------------------------------


def test_schema_is_the_charts_and_holds_the_user_deployments() -> None:
    assert hashlib.sha256((HELM / "values.schema.json").read_bytes()).hexdigest() == SCHEMA_SHA256
    validator_class().check_schema(schema())
    assert schema()["title"] == "DagsterHelmValues"
    assert schema()["properties"]["dagster-user-deployments"] == {"$ref": "#/$defs/UserDeployments"}
    assert schema()["properties"]["runLauncher"] == {"$ref": "#/$defs/RunLauncher"}


def test_values_pass_the_charts_schema() -> None:
    chart = values()
    assert merged_values_errors(chart) == []
    for deployment in chart["dagster-user-deployments"]["deployments"]:
        assert definition_errors(deployment, "UserDeployment") == []
    for limit in chart["concurrency"]["runs"]["tagConcurrencyLimits"]:
        assert definition_errors(limit, TAG_LIMIT) == []


@pytest.mark.parametrize(
    ("path", "wrong"),
    [
        ("runLauncher.type", "Nonsense"),  # not one of the chart's launchers
        ("dagsterWebserver.replicaCount", "two"),  # not an integer
        ("dagster-user-deployments.deployments.0.port", "3030"),  # a string
        ("concurrency.runs.maxConcurrentRuns", 4.5),  # not an integer
        ("telemetry.enable", False),  # a misspelt key in a closed object
    ],
)
def test_the_schema_rejects_broken_values(path: str, wrong: Any) -> None:
    broken = values()
    *parents, last = path.split(".")
    at(broken, ".".join(parents))[int(last) if last.isdigit() else last] = wrong
    found = merged_values_errors(broken)
    # Each error names where it is: the broken value or the object that holds it.
    assert any(path.startswith(error.split(":")[0]) for error in found), found


def test_a_code_location_without_its_port_is_rejected() -> None:
    deployment = code_location()
    del deployment["port"]
    assert "(top): 'port' is a required property" in definition_errors(deployment, "UserDeployment")


# --- the same instance as dagster.yaml ---------------------------------------------------------


def test_run_limits_equal_dagster_yaml() -> None:
    runs = dagster_yaml()["concurrency"]["runs"]
    chart = values()
    assert chart["concurrency"]["enabled"] is True
    assert chart["concurrency"]["runs"]["maxConcurrentRuns"] == runs["max_concurrent_runs"]
    assert chart["concurrency"]["runs"]["tagConcurrencyLimits"] == runs["tag_concurrency_limits"]
    # The chart refuses limits set in both places: the run coordinator's stay unset.
    queued = chart["dagsterDaemon"]["runCoordinator"]["config"]["queuedRunCoordinator"]
    assert not {"maxConcurrentRuns", "tagConcurrencyLimits"} & set(queued)


DAEMON = "dagsterDaemon"
QUEUED = f"{DAEMON}.runCoordinator.config.queuedRunCoordinator"


@pytest.mark.parametrize(
    ("chart_path", "instance_path"),
    [
        (f"{QUEUED}.dequeueIntervalSeconds", "run_coordinator.config.dequeue_interval_seconds"),
        (f"{QUEUED}.dequeueUseThreads", "run_coordinator.config.dequeue_use_threads"),
        (f"{QUEUED}.dequeueNumWorkers", "run_coordinator.config.dequeue_num_workers"),
        (f"{DAEMON}.runMonitoring.enabled", "run_monitoring.enabled"),
        (f"{DAEMON}.runMonitoring.startTimeoutSeconds", "run_monitoring.start_timeout_seconds"),
        (f"{DAEMON}.runMonitoring.pollIntervalSeconds", "run_monitoring.poll_interval_seconds"),
        (f"{DAEMON}.runRetries.enabled", "run_retries.enabled"),
        (f"{DAEMON}.runRetries.maxRetries", "run_retries.max_retries"),
        (f"{DAEMON}.sensors.useThreads", "sensors.use_threads"),
        (f"{DAEMON}.sensors.numWorkers", "sensors.num_workers"),
        ("scheduler.config.daemonScheduler.maxCatchupRuns", "scheduler.config.max_catchup_runs"),
        ("scheduler.config.daemonScheduler.maxTickRetries", "scheduler.config.max_tick_retries"),
        (
            "retention.sensor.purgeAfterDays.skipped",
            "retention.sensor.purge_after_days.skipped",
        ),
        ("telemetry.enabled", "telemetry.enabled"),
    ],
)
def test_instance_settings_equal_dagster_yaml(chart_path: str, instance_path: str) -> None:
    assert at(values(), chart_path) == at(dagster_yaml(), instance_path)


def test_instance_classes_are_dagster_yamls() -> None:
    instance = dagster_yaml()
    chart = values()
    assert instance["run_coordinator"]["class"] == "QueuedRunCoordinator"
    assert chart[DAEMON]["runCoordinator"]["type"] == "QueuedRunCoordinator"
    assert chart[DAEMON]["runCoordinator"]["enabled"] is True
    assert instance["scheduler"]["class"] == chart["scheduler"]["type"] == "DagsterDaemonScheduler"
    assert chart["runLauncher"]["type"] == "K8sRunLauncher"


# --- the code location, the secrets, the database -----------------------------------------------


def test_code_location_is_the_machines() -> None:
    deployment = code_location()
    assert deployment["name"] == LOCATION
    args = deployment["dagsterApiGrpcArgs"]
    assert args[args.index("-m") + 1] == MODULE
    assert args[args.index("--location-name") + 1] == LOCATION
    assert deployment["port"] == 3030
    env = {item["name"]: item["value"] for item in deployment["env"]}
    assert env["DAGSTER_HOME"] == values()["global"]["dagsterHome"]


def test_code_location_runs_and_ingress_share_image_and_secret() -> None:
    deployment = code_location()
    image = deployment["image"]
    assert (image["repository"], image["tag"]) == ("followup", "1.0.0")
    assert ingress_container()["image"] == f"{image['repository']}:{image['tag']}"
    assert deployment["envSecrets"] == [{"name": SECRET}]
    launcher = values()["runLauncher"]["config"]["k8sRunLauncher"]
    assert launcher["envSecrets"] == [{"name": SECRET}]
    # The ingress reads only its own secrets, as files: never the vendors' keys.
    container = ingress_container()
    assert "envFrom" not in container
    env = {item["name"]: item.get("value") for item in container["env"]}
    (mount,) = container["volumeMounts"]
    assert env["FOLLOWUP_SECRETS_DIR"] == mount["mountPath"]
    pod = manifests()["Deployment"]["spec"]["template"]["spec"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert volume["secret"]["secretName"] == "followup-ingress-secrets"


def test_dagster_database_is_outside_and_its_password_a_secret() -> None:
    chart = values()
    assert chart["postgresql"]["enabled"] is False
    assert chart["postgresql"]["postgresqlHost"]
    assert "postgresqlPassword" not in chart["postgresql"]
    assert chart["generatePostgresqlPasswordSecret"] is False
    assert chart["global"]["postgresqlSecretName"] == "dagster-postgresql-secret"
    assert "dagster-postgresql-secret" in (HELM / "values.yaml").read_text(encoding="utf-8")


def test_the_ui_is_not_exposed() -> None:
    chart = values()
    assert chart["dagsterWebserver"]["service"]["type"] == "ClusterIP"
    assert chart["ingress"]["enabled"] is False
    assert "deploy/nginx/" in (HELM / "values.yaml").read_text(encoding="utf-8")


def test_every_followup_variable_named_is_a_setting() -> None:
    known = {ENV_PREFIX + name.upper() for name in Settings.model_fields} | {SECRETS_DIR}
    named: set[str] = set()
    for folder in (HELM, K8S):
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                named |= set(re.findall(r"FOLLOWUP_[A-Z0-9_]+", path.read_text(encoding="utf-8")))
    assert named, "the files name the variables they rely on"
    assert named - known == set()


def test_every_secret_setting_is_listed_for_the_secret() -> None:
    text = (HELM / "values.yaml").read_text(encoding="utf-8")
    secrets = [
        ENV_PREFIX + name.upper()
        for name, field in Settings.model_fields.items()
        if "SecretStr" in repr(field.annotation)
    ]
    assert secrets
    assert [name for name in secrets if name not in text] == []


# --- the ingress ---------------------------------------------------------------------------------


def test_ingress_probes_a_route_of_the_app_on_its_port() -> None:
    # The pool is built but never opened: no database is needed to list the routes.
    app = create_app(Settings(_env_file=None), "postgresql://nobody@127.0.0.1:1/none")
    gets = {r.path for r in app.routes if isinstance(r, Route) and "GET" in (r.methods or ())}
    container = ingress_container()
    assert [port["containerPort"] for port in container["ports"]] == [INGRESS_PORT]
    for probe in ("readinessProbe", "livenessProbe"):
        check = container[probe]["httpGet"]
        assert check["path"] == "/healthz"
        assert check["path"] in gets
        assert check["port"] == INGRESS_PORT


def test_ingress_service_reaches_the_pods() -> None:
    service = manifests()["Service"]["spec"]
    pod_labels = manifests()["Deployment"]["spec"]["template"]["metadata"]["labels"]
    assert service["type"] == "ClusterIP"
    assert service["selector"].items() <= pod_labels.items()
    (port,) = service["ports"]
    assert port["port"] == port["targetPort"] == INGRESS_PORT


def test_ingress_serve_command_parses() -> None:
    """``followup serve ingress`` with the k8s file's exact arguments."""
    command = ingress_container()["command"]
    assert command[:3] == ["followup", "serve", "ingress"]
    args = build_parser().parse_args(command[1:])
    assert (args.command, args.role) == ("serve", "ingress")
    assert (args.host, args.port, args.workers) == (EVERY_INTERFACE, INGRESS_PORT, 2)


def test_followup_ingress_takes_the_same_options() -> None:
    """``followup ingress`` (what ``serve ingress`` runs) takes the same options and values."""
    options = ingress_container()["command"][3:]
    args = build_parser().parse_args(["ingress", *options])
    assert args.command == "ingress"
    assert (args.host, args.port, args.workers) == (EVERY_INTERFACE, INGRESS_PORT, 2)


def test_ingress_scales_and_stays_available() -> None:
    deployment = manifests()["Deployment"]
    hpa = manifests()["HorizontalPodAutoscaler"]
    pdb = manifests()["PodDisruptionBudget"]
    assert hpa["apiVersion"] == "autoscaling/v2"
    target = hpa["spec"]["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("Deployment", deployment["metadata"]["name"])
    assert hpa["spec"]["minReplicas"] == deployment["spec"]["replicas"] == 2
    assert hpa["spec"]["maxReplicas"] > hpa["spec"]["minReplicas"]
    (metric,) = hpa["spec"]["metrics"]
    assert metric["resource"]["name"] == "cpu"
    assert metric["resource"]["target"]["type"] == "Utilization"
    assert pdb["apiVersion"] == "policy/v1"
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["selector"] == deployment["spec"]["selector"]
    # Every pod at once stays within Postgres's default max_connections (100), Dagster aside.
    env = {item["name"]: item["value"] for item in ingress_container()["env"]}
    connections = int(env[f"{ENV_PREFIX}INGRESS_DB_CONNECTIONS"])
    assert hpa["spec"]["maxReplicas"] * connections < 100
