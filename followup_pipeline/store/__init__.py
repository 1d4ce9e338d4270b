"""The machine's flow state in Postgres: a module per table, its queries in ``queries/<table>.sql``.

- ``watches`` (watches), ``steps`` (watch_steps), ``ledger`` (actions and action_attempts),
  ``events`` (events, step_completions, deal_marks), ``holidays``, ``cadences``, ``enrichments``,
  ``alerts``; ``run_lock`` (an advisory lock), ``presence`` (a run's session, its sign of life),
  ``dead_letters`` and ``watch_control`` (operations over several tables), ``db`` (connections,
  the pool, errors), ``migrate`` and ``embedded``.
- Rows come back typed: frozen dataclasses through ``db.typed_row`` (``class_row`` that ignores
  columns a later migration added), never dicts.

The transaction rule: **the caller opens the transaction.** A function here takes a connection
and runs its statements on it; it never commits, rolls back or begins a transaction of its own.
The caller puts what must land together in one ``with conn.transaction():`` block and decides
when it commits. A function whose statements are only right together (a watch with its steps,
an attempt with its action) says "call inside a transaction" and checks it with
``db.require_transaction``, so forgetting it fails loudly instead of committing half.
"""
