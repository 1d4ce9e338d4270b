-- 0021: a payment's amount in its currency's own unit (docs/architecture.md §9, normalise).
-- Stripe gives an amount in the currency's minor unit; `domain/money.py` converts it with the
-- currency's decimals (¥5,000 is 5000 JPY, not 50). A currency not in its table is not
-- guessed: the amount is kept as it came, and `amount_unit` says which of the two it is.
-- NULL: the event brought no amount.
ALTER TABLE lead_events ADD COLUMN amount_unit text
    CONSTRAINT lead_events_amount_unit_valid CHECK (amount_unit IN ('major', 'minor'));
-- The amounts stored before were divided by 100 whatever the currency: they say they are in
-- the major unit (right for two-decimal currencies; a zero- or three-decimal one is not
-- corrected here: the raw event, events.body, keeps its amount_total).
UPDATE lead_events SET amount_unit = 'major' WHERE amount IS NOT NULL;
ALTER TABLE lead_events ADD CONSTRAINT lead_events_amount_unit_given
    CHECK ((amount IS NULL) = (amount_unit IS NULL));
