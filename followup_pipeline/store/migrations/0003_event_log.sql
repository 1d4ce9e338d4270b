-- 0003: what the ingress, the register run and the dead-letter commands look up often.
-- Dead letters are listed and counted (the /metrics gauge) without scanning the whole log.
CREATE INDEX events_dead ON events (id) WHERE status = 'dead';
-- Step completions of one event, read when an operator shows or replays it.
CREATE INDEX step_completions_event ON step_completions (event_id);
