-- 0024: a lead's classification is the person's, not the last event's (docs/architecture.md §9,
-- classify). An event with no message of its own (a payment) does not reclassify the person:
-- what their last classification from a message said stands, and the priority never becomes
-- less urgent. Each row keeps whether its event had a message, and, where the person's
-- classification differs from the model's answer, that answer as it came.
ALTER TABLE lead_classifications ADD COLUMN from_message boolean NOT NULL DEFAULT true;
ALTER TABLE lead_classifications ADD COLUMN answer jsonb;
UPDATE lead_classifications c SET from_message = (e.message IS NOT NULL)
FROM lead_events e WHERE e.event_id = c.event_id;
