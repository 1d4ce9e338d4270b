-- 0021: a payment's amount in its currency's own unit (docs/architecture.md §9, normalise).
-- Stripe gives an amount in the currency's minor unit; `domain/money.py` converts it with the
-- currency's decimals (¥5,000 is 5000 JPY, not 50). A currency not in its table is not
-- guessed: the amount is kept as it came, and `amount_unit` says which of the two it is.
-- NULL: the event brought no amount.
ALTER TABLE lead_events ADD COLUMN amount_unit text
    CONSTRAINT lead_events_amount_unit_valid CHECK (amount_unit IN ('major', 'minor'));
-- The amounts stored before were divided by 100 whatever the currency, so amount * 100 is the
-- provider's number exactly: converted again with `domain/money.py`'s table as it stands in this
-- migration (a test holds the two lists equal), and kept in minor units where the code is not
-- in it. Only payments carry an amount.
UPDATE lead_events
SET amount = CASE
        WHEN upper(currency) IN (
    'BIF', 'CLP', 'DJF', 'GNF', 'JPY', 'KMF', 'KRW', 'MGA', 'PYG', 'RWF', 'VND', 'VUV', 'XAF',
    'XOF', 'XPF'
        ) THEN round(amount * 100)
        WHEN upper(currency) IN (
    'BHD', 'JOD', 'KWD', 'OMR', 'TND'
        ) THEN round(amount / 10, 3)
        ELSE amount
    END,
    amount_unit = 'major'
WHERE amount IS NOT NULL;
UPDATE lead_events
SET amount = round(amount * 100),
    amount_unit = 'minor'
WHERE amount IS NOT NULL AND (currency IS NULL OR upper(currency) NOT IN (
    'AED', 'AFN', 'ALL', 'AMD', 'ANG', 'AOA', 'ARS', 'AUD', 'AWG', 'AZN', 'BAM', 'BBD', 'BDT',
    'BGN', 'BHD', 'BIF', 'BMD', 'BND', 'BOB', 'BRL', 'BSD', 'BWP', 'BYN', 'BZD', 'CAD', 'CDF',
    'CHF', 'CLP', 'CNY', 'COP', 'CRC', 'CVE', 'CZK', 'DJF', 'DKK', 'DOP', 'DZD', 'EGP', 'ETB',
    'EUR', 'FJD', 'FKP', 'GBP', 'GEL', 'GIP', 'GMD', 'GNF', 'GTQ', 'GYD', 'HKD', 'HNL', 'HTG',
    'HUF', 'IDR', 'ILS', 'INR', 'ISK', 'JMD', 'JOD', 'JPY', 'KES', 'KGS', 'KHR', 'KMF', 'KRW',
    'KWD', 'KYD', 'KZT', 'LAK', 'LBP', 'LKR', 'LRD', 'LSL', 'MAD', 'MDL', 'MGA', 'MKD', 'MMK',
    'MNT', 'MOP', 'MUR', 'MVR', 'MWK', 'MXN', 'MYR', 'MZN', 'NAD', 'NGN', 'NIO', 'NOK', 'NPR',
    'NZD', 'OMR', 'PAB', 'PEN', 'PGK', 'PHP', 'PKR', 'PLN', 'PYG', 'QAR', 'RON', 'RSD', 'RUB',
    'RWF', 'SAR', 'SBD', 'SCR', 'SEK', 'SGD', 'SHP', 'SLE', 'SOS', 'SRD', 'STD', 'SZL', 'THB',
    'TJS', 'TND', 'TOP', 'TRY', 'TTD', 'TWD', 'TZS', 'UAH', 'UGX', 'USD', 'UYU', 'UZS', 'VND',
    'VUV', 'WST', 'XAF', 'XCD', 'XOF', 'XPF', 'YER', 'ZAR', 'ZMW'
));
ALTER TABLE lead_events ADD CONSTRAINT lead_events_amount_unit_given
    CHECK ((amount IS NULL) = (amount_unit IS NULL));
