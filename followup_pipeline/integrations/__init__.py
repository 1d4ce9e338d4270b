"""Typed clients for the four vendors (EspoCRM, ClickUp, Microsoft Graph, Mistral) and their
Dagster resources. Clients raise only the errors of ``errors``; see that module's tree."""
