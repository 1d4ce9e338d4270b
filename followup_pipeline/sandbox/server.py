"""``followup sandbox``: serve the sandbox on loopback and print the settings that use it."""

import argparse
from pathlib import Path

import uvicorn

from followup_pipeline.sandbox import moodle_demo, persist
from followup_pipeline.sandbox.app import create_app, sandbox_state
from followup_pipeline.sandbox.config import SandboxConfig
from followup_pipeline.sandbox.demo import demo_data
from followup_pipeline.sandbox.environment import env_lines
from followup_pipeline.sandbox.records import create_deal
from followup_pipeline.settings import SECRET_VARIABLES


def parser() -> argparse.ArgumentParser:
    """The command's arguments."""
    command = argparse.ArgumentParser(
        prog="followup sandbox",
        description="Serve local doubles of EspoCRM, ClickUp, Microsoft Graph and Mistral, and "
        "the site form's and the payment provider's webhooks.",
    )
    command.add_argument("--host", default="127.0.0.1", help="interface (default 127.0.0.1)")
    command.add_argument("--port", type=int, default=8765, help="port (default 8765)")
    command.add_argument("--seed", type=int, default=0, help="seed of every random choice")
    command.add_argument(
        "--webhook-url",
        help="where EspoCRM webhooks are delivered (site forms and payments: beside it)",
    )
    command.add_argument("--env-file", type=Path, help="also write the FOLLOWUP_* lines here")
    command.add_argument("--no-demo-data", action="store_true", help="start with no deals")
    command.add_argument(
        "--state-file",
        type=Path,
        help="keep the deals, tasks and mail here across restarts (demo data only if absent)",
    )
    command.add_argument(
        "--demo",
        action="store_true",
        help="a live demo: webhooks every 5 s, and one deal changes every --activity-every s "
        "(now and then a site form or a payment arrives too)",
    )
    command.add_argument("--activity-every", type=float, default=90.0, help="seconds (--demo)")
    return command


#: Variables that hold secrets the ingress reads itself (not Dagster: not in SECRET_VARIABLES).
WEBHOOK_SECRETS = (
    "FOLLOWUP_ESPOCRM_WEBHOOKS",
    "FOLLOWUP_STANDARD_WEBHOOKS",
    "FOLLOWUP_STRIPE_WEBHOOKS",
)


def masked(line: str) -> str:
    """An env line with its value hidden when the variable holds a secret."""
    name, _, _ = line.partition("=")
    if name in SECRET_VARIABLES.values() or name in WEBHOOK_SECRETS:
        return f"{name}=…  (hidden; --env-file FILE writes it)"
    return line


def main(argv: list[str] | None = None) -> int:
    """Load demo data, print (and optionally write) the env lines, then serve until stopped."""
    args = parser().parse_args(argv)
    demo = {"webhook_queue_interval_s": 5.0, "demo_activity_s": args.activity_every}
    config = SandboxConfig(
        seed=args.seed,
        webhook_url=args.webhook_url,
        state_file=args.state_file,
        **(demo if args.demo else {}),
    )
    try:
        app = create_app(config)
    except persist.StateInUse as error:
        print(f"followup sandbox: {error}; stop it first, or give another --state-file")
        return 1
    state = sandbox_state(app)
    if app.state.kept:
        print(f"sandbox: {len(state.deals)} deal(s) as kept in {args.state_file}", flush=True)
    elif not args.no_demo_data:
        for deal in demo_data(args.seed, state.clock.now()):
            create_deal(state, deal, webhooks=False)
        moodle_demo.load_demo(state, args.seed)  # the two academies' Moodle sites
    lines = env_lines(config, f"http://{args.host}:{args.port}")
    if args.env_file is not None:
        # Readable by its owner only: it holds the sandbox's secrets.
        args.env_file.touch(mode=0o600)
        args.env_file.chmod(0o600)
        args.env_file.write_text("\n".join(lines) + "\n", encoding="utf-8")
        print(f"wrote {len(lines)} settings to {args.env_file}", flush=True)
    else:
        # No secret on the console, the sandbox's included: they are in the README, or written
        # with --env-file.
        print("\n".join(masked(line) for line in lines), flush=True)
    uvicorn.run(app, host=args.host, port=args.port, ws="none", log_level="info")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
