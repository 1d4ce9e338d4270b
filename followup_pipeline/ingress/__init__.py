"""The webhook ingress (Starlette): verify, store, commit, then acknowledge."""

from followup_pipeline.ingress.app import create_app

__all__ = ["create_app"]
