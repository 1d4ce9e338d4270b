"""The production files (``deploy/``: Dockerfile, compose, systemd units, nginx) agree with the
code they run: every command parses as the ``followup`` command line, every port is the one the
code serves on, every ``FOLLOWUP_*`` name is a setting, and the edge lets only webhooks in,
over TLS. Fast: no network, no database."""

from __future__ import annotations

import configparser
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from followup_pipeline.cli import build_parser
from followup_pipeline.commands.serve import ROLES, WEBSERVER_PORT
from followup_pipeline.settings import ENV_PREFIX, SECRET_VARIABLES, Settings

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
SETTINGS = {f"{ENV_PREFIX}{name.upper()}" for name in Settings.model_fields}
DEFAULTS = {name: field.default for name, field in Settings.model_fields.items()}
#: The port each role serves on, by the code's defaults.
PORTS = {
    "ingress": DEFAULTS["ingress_port"],
    "code-server": DEFAULTS["code_server_port"],
    "webserver": WEBSERVER_PORT,
}
UNITS = sorted((DEPLOY / "systemd").glob("*.service"))
NGINX = (DEPLOY / "nginx" / "followup.conf").read_text(encoding="utf-8")


def _compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((DEPLOY / "compose.yaml").read_text("utf-8"))
    return loaded


def _unit(path: Path) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(path.read_text(encoding="utf-8"))
    return parser


def _commands() -> list[tuple[str, list[str]]]:
    """Every ``followup …`` command the files run: (where, argv)."""
    found = []
    docker = (DEPLOY / "Dockerfile").read_text(encoding="utf-8")
    cmd = re.search(r"^CMD (\[.*\])$", docker, re.MULTILINE)
    assert cmd is not None
    found.append(("Dockerfile CMD", yaml.safe_load(cmd.group(1))))
    for name, service in _compose()["services"].items():
        if "command" in service:
            found.append((f"compose {name}", list(service["command"])))
    for path in UNITS:
        argv = shlex.split(_unit(path)["Service"]["ExecStart"])
        found.append((path.name, [Path(argv[0]).name, *argv[1:]]))
    return found


def _option(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


@pytest.mark.parametrize(("where", "argv"), _commands(), ids=lambda value: str(value))
def test_every_command_is_one_the_code_has(where: str, argv: list[str]) -> None:
    assert argv[0] == "followup", where
    args = build_parser().parse_args(argv[1:])
    assert args.command in ("serve", "migrate", "watchdog"), where
    if args.command == "serve":
        assert args.role in ROLES
        port = _option(argv, "--port")
        assert port is None or int(port) == PORTS[args.role], f"{where}: the port of {args.role}"


def test_every_role_is_deployed_by_compose_and_by_systemd() -> None:
    roles = {"compose": set(), "systemd": set()}  # type: dict[str, set[str]]
    for where, argv in _commands():
        if argv[1:2] == ["serve"]:
            roles["systemd" if where.endswith(".service") else "compose"].add(argv[2])
    assert roles["systemd"] == set(ROLES)
    assert roles["compose"] == set(ROLES)


def test_every_followup_name_in_deploy_is_a_setting() -> None:
    unknown = {}
    for path in DEPLOY.rglob("*"):
        if path.is_file() and path.name != "values.schema.json":
            names = set(re.findall(r"\bFOLLOWUP_[A-Z0-9_]+\b", path.read_text(encoding="utf-8")))
            names -= {*SETTINGS, f"{ENV_PREFIX}SECRETS_DIR"}
            if names:
                unknown[str(path.relative_to(DEPLOY))] = sorted(names)
    assert unknown == {}


def test_the_image_exposes_the_ports_the_roles_serve_on() -> None:
    docker = (DEPLOY / "Dockerfile").read_text(encoding="utf-8")
    exposed = {int(port) for line in re.findall(r"^EXPOSE (.*)$", docker, re.M)
               for port in line.split()}  # fmt: skip
    assert exposed == set(PORTS.values())


def test_compose_publishes_only_the_edge_and_the_ui_on_loopback() -> None:
    services = _compose()["services"]
    published = {name: service["ports"] for name, service in services.items() if "ports" in service}
    assert published == {"edge": ["443:443", "127.0.0.1:8443:8443"]}
    for name, service in services.items():
        environment = service.get("environment", {})
        if "FOLLOWUP_CODE_SERVER_PORT" in environment:
            assert int(environment["FOLLOWUP_CODE_SERVER_PORT"]) == PORTS["code-server"], name
        # Secrets come from files, never from the environment.
        assert not set(environment) & set(SECRET_VARIABLES.values()), name
    for mount in services["edge"]["volumes"]:
        source = mount.split(":")[0]
        if source.startswith("./nginx"):
            assert (DEPLOY / source).exists()


def test_units_take_secrets_as_files_and_restart() -> None:
    secret_names = {*SECRET_VARIABLES.values(), "FOLLOWUP_DATABASE_URL", "FOLLOWUP_DAGSTER_PG_URL",
                    "FOLLOWUP_ESPOCRM_WEBHOOKS", "FOLLOWUP_STANDARD_WEBHOOKS",
                    "FOLLOWUP_STRIPE_WEBHOOKS"}  # fmt: skip
    # The link keys are no vendor's: the ingress verifies what the runs sign.
    vendors = set(SECRET_VARIABLES.values()) - {
        "FOLLOWUP_DATABASE_URL", "FOLLOWUP_DAGSTER_PG_URL", "FOLLOWUP_LINK_KEYS"
    }  # fmt: skip
    for path in UNITS:
        service = _unit(path)["Service"]
        text = path.read_text(encoding="utf-8")
        loaded = set(re.findall(r"^LoadCredential=([A-Z_]+):", text, re.M))
        assert loaded <= secret_names, path.name
        assert "Environment=FOLLOWUP_SECRETS_DIR=%d" in text, path.name
        # No secret in a unit's own environment.
        assert not re.search(r"^Environment=(" + "|".join(secret_names) + ")=", text, re.M)
        if path.name not in ("followup-migrate.service", "followup-watchdog.service"):
            assert service["Restart"] == "always", path.name
        # Only the code server (whose runs call the vendors) gets the vendors' secrets, and the
        # watchdog those of the alert channels (it sends its alerts itself).
        if path.name == "followup-watchdog.service":
            assert loaded & vendors == {"FOLLOWUP_GRAPH_CLIENT_SECRET", "FOLLOWUP_CLICKUP_TOKEN"}
        elif loaded & vendors:
            assert path.name == "followup-code-server.service"


def _server_blocks(config: str) -> list[str]:
    """The text of each top-level ``server { … }`` block."""
    blocks, depth, start = [], 0, -1
    for match in re.finditer(r"server\s*\{|\{|\}", config):
        token = match.group(0)
        if token.startswith("server") and depth == 0:
            start, depth = match.start(), 1
        elif token == "{" and depth:
            depth += 1
        elif token == "}" and depth:
            depth -= 1
            if depth == 0:
                blocks.append(config[start : match.end()])
    return blocks


def _code(config: str) -> str:
    return "\n".join(line.split("#", 1)[0] for line in config.splitlines())


def test_the_edge_serves_only_webhooks_and_links_over_tls_and_the_ui_behind_a_password() -> None:
    webhooks, ui = _server_blocks(_code(NGINX))
    assert re.findall(r"listen\s+([^;]+);", webhooks) == ["443 ssl"]
    assert re.findall(r"listen\s+([^;]+);", ui) == ["8443 ssl"]
    locations = re.findall(r"location\s+([^{]+)\{([^}]*)\}", webhooks)
    proxied = [where.strip() for where, body in locations if "proxy_pass" in body]
    assert proxied
    assert all(where.lstrip("=~ ^").startswith(("/webhooks/", "/links/")) for where in proxied)
    # The links of mails: no retried POST on a second replica, no token in the access log.
    [links] = [body for where, body in locations if "/links/" in where]
    assert "non_idempotent" not in links
    assert "access_log off" in links
    (rest,) = [body for where, body in locations if where.strip() == "/"]
    assert "return 404" in rest
    assert "auth_basic_user_file" in ui
    assert "auth_basic_user_file" not in webhooks
    # Every source has its own rate.
    assert set(re.findall(r"limit_req zone=(\w+)", webhooks)) == {
        "espocrm", "site_form", "payment", "other_source", "links"
    }  # fmt: skip


def test_the_edge_and_the_ingress_agree_on_ports_and_body_size() -> None:
    code = _code(NGINX)
    upstreams = re.findall(r"server\s+([\w.-]+):(\d+)", code)
    assert {int(port) for host, port in upstreams if host.startswith("ingress")} == {
        PORTS["ingress"]
    }
    assert {int(port) for host, port in upstreams if host == "webserver"} == {WEBSERVER_PORT}
    (size,) = re.findall(r"client_max_body_size\s+(\d+)m;", _server_blocks(code)[0])
    assert int(size) * 1024 * 1024 == DEFAULTS["ingress_max_body_bytes"]


def test_compose_keeps_what_faces_the_internet_off_the_code_servers_network() -> None:
    services = _compose()["services"]
    control = set(services["code-server"]["networks"])
    # The code server's gRPC has no authentication: any job, with every secret.
    for name in ("edge", "ingress-1", "ingress-2"):
        assert not control & set(services[name]["networks"]), name
    # The edge reaches the UI it guards, and the replicas it balances.
    assert set(services["edge"]["networks"]) & set(services["webserver"]["networks"])
    assert set(services["edge"]["networks"]) & set(services["ingress-1"]["networks"])


def test_the_watchdog_runs_outside_the_daemon_in_every_deployment() -> None:
    """systemd: a oneshot look every minute from its timer; compose: a service of its own;
    Kubernetes: a CronJob every minute, one look at a time."""
    timer = _unit(DEPLOY / "systemd" / "followup-watchdog.timer")
    assert timer["Timer"]["OnCalendar"] == "*-*-* *:*:00"
    service = _unit(DEPLOY / "systemd" / "followup-watchdog.service")["Service"]
    assert (service["Type"], service["ExecStart"]) == (
        "oneshot", "/opt/followup/bin/followup watchdog --once"
    )  # fmt: skip
    assert _compose()["services"]["watchdog"]["command"] == ["followup", "watchdog"]
    job = yaml.safe_load((DEPLOY / "k8s" / "watchdog.yaml").read_text(encoding="utf-8"))
    assert (job["kind"], job["spec"]["schedule"]) == ("CronJob", "* * * * *")
    assert job["spec"]["concurrencyPolicy"] == "Forbid"
    [container] = job["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    args = build_parser().parse_args(container["command"][1:])
    assert (args.command, args.once) == ("watchdog", True)
