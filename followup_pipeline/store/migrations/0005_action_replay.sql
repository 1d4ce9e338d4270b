-- 0005: an action fails for good after a number of attempts and waits as a dead letter; a replay
-- records how many attempts it had then, so it gets a fresh budget without renumbering attempts.
ALTER TABLE actions ADD COLUMN replayed_attempts integer NOT NULL DEFAULT 0
    CONSTRAINT actions_replayed_attempts_valid CHECK (replayed_attempts >= 0);
