-- 0012: the morning list (docs/architecture.md §2 "Reports"). What it shows of a deal without
-- asking the CRM: its amount and currency, copied like its name and stage, kept current by every
-- reconciliation. NULL: the CRM has no amount, or the watch was opened before this migration
-- (the next reconciliation fills it in).
ALTER TABLE watches ADD COLUMN amount numeric;
ALTER TABLE watches ADD COLUMN amount_currency text;

-- A report with nothing due or overdue is not sent: its action is recorded suppressed, reason
-- `nothing_due` (a later run of the same window with something due sends it after all).
ALTER TABLE actions DROP CONSTRAINT actions_reason_valid;
ALTER TABLE actions ADD CONSTRAINT actions_reason_valid
    CHECK (reason IN ('deal_closed', 'superseded', 'paused', 'dry_run', 'nothing_due'));
