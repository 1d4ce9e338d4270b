-- 0002: the CRM's names travel with the watch, so an operator reads them without asking the CRM.
ALTER TABLE watches ADD COLUMN assigned_user_name text;
ALTER TABLE watches ADD COLUMN crm_url text;
