"""Typed clients for the vendors (EspoCRM, its Leads among them; ClickUp; Microsoft Graph;
Mistral; People Data Labs' company lookup; Moodle; Accredible) and their Dagster resources
(``resources``). Clients raise only the errors of ``errors``; see that module's tree."""
