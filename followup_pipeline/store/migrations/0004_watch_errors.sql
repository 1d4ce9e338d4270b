-- 0004: the last CRM error that holds a watch's due step back, for `followup watches explain`.
ALTER TABLE watches ADD COLUMN last_error text;
ALTER TABLE watches ADD COLUMN last_error_at timestamptz;
