"""Enrichment: a checked two-line summary of each open deal whose e-mails changed.

What changed is read in one listing (the e-mails created since the job's cursor, every deal at
once); the open deals among them, and every watch opened since, wait in ``enrich_queue`` until
summarised. The cursor moves in the same transaction that queues them, so a later failure loses
nothing: a deal leaves the queue only when it was summarised, sent to review, found unchanged,
found without e-mails, or its watch closed. The queue is worked oldest change first, within the
run's budget of calls and tokens; the rest waits for the next run.

No wasted calls: the hash of exactly what would be sent is compared with the input of the
deal's latest summary or review item; the same input makes no call.
"""

from collections import Counter
from datetime import datetime, timedelta

from followup_pipeline.domain.emails import MailText, mail_text, masked
from followup_pipeline.domain.summaries import SummaryContext, SummaryRejected, check_summary
from followup_pipeline.engine.scope import Database, RunScope, Tally
from followup_pipeline.integrations.errors import (
    IntegrationError,
    NotFoundError,
    PermanentError,
)
from followup_pipeline.integrations.espocrm import EspoCrmClient
from followup_pipeline.integrations.espocrm_models import Email
from followup_pipeline.integrations.mistral import (
    MistralClient,
    ModelAnswer,
    input_hash,
    summary_messages,
)
from followup_pipeline.settings import Settings
from followup_pipeline.store import enrichments as store
from followup_pipeline.store.enrichments import NewSummary, OpenWatch
from followup_pipeline.store.lead_enrichment import model_spend_since

CURSOR = "enrich"
#: The listing of changes reaches back this far before the cursor (clocks disagree a little).
OVERLAP = timedelta(minutes=5)
#: A refused key refuses every call: the run stops asking.
REFUSED = {401, 403}


class Summariser:
    """One enrich run at ``now``."""

    def __init__(
        self,
        run: RunScope,
        postgres: Database,
        crm: EspoCrmClient,
        model: MistralClient,
        settings: Settings,
    ) -> None:
        self.postgres = postgres
        self.crm = crm
        self.model = model
        self.settings = settings
        self.now = run.now
        self.tally = Tally(run.log)
        self.tokens = Counter[str]()

    def run(self) -> Tally:
        """Queue what changed, then summarise the queue within the budget."""
        if self.queue_changes():
            self.work_queue()
        return self.tally

    def queue_changes(self) -> bool:
        """Queue the open deals with new e-mails and the watches opened since the cursor; move
        the cursor. False when the CRM could not be read (nothing moves, the next run retries)."""
        with self.postgres.connection() as conn:
            cursor = store.cursor_of(conn, CURSOR)
        lookback = timedelta(days=self.settings.enrich_lookback_days)
        since = cursor - OVERLAP if cursor else self.now - lookback
        try:
            listing = self.crm.list_emails_since(since=since)
        except IntegrationError as error:
            self.tally.problem(f"CRM unreachable, no new e-mails read this run: {error}", error)
            return False
        for broken in listing.invalid:
            self.tally.problem(f"an e-mail broke its schema and is left out: {broken}")
        changed: dict[str, datetime] = {}
        for email in listing.records:
            if email.parent_id:
                when = email.created_at or self.now
                changed[email.parent_id] = min(changed.get(email.parent_id, when), when)
        self.tally.count("new_emails", len(listing.records))
        with self.postgres.connection() as conn, conn.transaction():
            # The first run queues every open watch; afterwards a new watch is queued by the
            # database as it opens (a trigger), so only changed deals are added here.
            every = cursor is None
            watches = store.watches_to_summarise(conn, subject_ids=list(changed), every=every)
            for watch in watches:
                store.enqueue(
                    conn, watch.subject_id, changed_at=changed.get(watch.subject_id, self.now)
                )
            store.set_cursor(conn, CURSOR, self.now)
        self.tally.count("queued", len(watches))
        return True

    def work_queue(self) -> None:
        """Summarise the waiting deals, oldest change first, until the budget is spent."""
        with self.postgres.connection() as conn:
            waiting = store.queued(conn)
            # One spend limit for the model per hour: what the model cost in the last hour, deal
            # summaries (of earlier runs) and lead classifications alike, counts against this
            # run's budget.
            leads = model_spend_since(conn, self.now - timedelta(hours=1))
        calls = leads.calls
        # A fifth of the hour's calls is kept for leads: a backlog of deals never holds a lead
        # back for hour after hour (a lead met by a spent budget waits an hour).
        limit = self.settings.enrich_budget_calls - self.settings.enrich_budget_calls // 5
        for index, item in enumerate(waiting):
            with self.postgres.connection() as conn:
                watch = store.watch_to_summarise(conn, item.subject_id)
            if watch is None:
                self._done(item.subject_id, "closed_meanwhile")
                continue
            spent = leads.tokens + self.tokens["prompt_tokens"] + self.tokens["completion_tokens"]
            if calls >= limit or (spent >= self.settings.enrich_budget_tokens):
                self.tally.count("deferred_by_budget", len(waiting) - index)
                return
            self.tally.count("looked_at")
            try:
                mails = self.recent_mails(watch.subject_id)
            except NotFoundError:
                self._done(watch.subject_id, "deal_gone")
                continue
            except IntegrationError as error:
                self.tally.count("failed")
                self.tally.problem(
                    f"deal {watch.subject_id}: CRM: {error}; it waits",
                    error,
                    item=f"deal {watch.subject_id}",
                )
                continue
            try:
                calls += self.summarise(watch, mails)
            except PermanentError as error:
                self.tally.count("failed")
                if error.status in REFUSED:
                    self.tally.problem(
                        f"Mistral refused the key, no more calls this run: {error}", error
                    )
                    self.tally.count("deferred_by_refusal", len(waiting) - index - 1)
                    return
                self.refused(watch, mails, error)
            except IntegrationError as error:
                # The SDK spent its retries: the service is down or overloaded. Asking the next
                # deals would only spend the run's time limit on timeouts.
                self.tally.count("failed")
                self.tally.problem(f"Mistral unavailable, no more calls this run: {error}", error)
                self.tally.count("deferred_by_outage", len(waiting) - index - 1)
                return

    def recent_mails(self, deal_id: str) -> list[MailText]:
        """The deal's newest e-mails of the look-back window, oldest first, made fit to send."""
        since = self.now - timedelta(days=self.settings.enrich_lookback_days)
        emails: list[Email] = self.crm.list_emails(deal_id=deal_id, since=since).records
        newest = sorted(emails, key=lambda e: (e.date_sent or self.now, e.id))
        s = self.settings
        return [
            mail_text(
                sent_at=e.date_sent,
                sender=e.from_address,
                subject=e.subject or e.name,
                # EspoCRM's own plain text when it has one, else the body (HTML made text).
                body=e.body_plain or e.body,
                is_html=not e.body_plain and bool(e.is_html),
                max_chars=s.enrich_email_max_chars,
                mask=s.enrich_mask_personal_data,
            )
            for e in newest[-s.enrich_max_emails :]
        ]

    def messages(self, watch: OpenWatch, mails: list[MailText]) -> list[dict[str, str]]:
        """Exactly what goes to the model for this deal (its name masked like the e-mails)."""
        name = watch.subject_name
        if self.settings.enrich_mask_personal_data:
            name = masked(name)
        max_chars = self.settings.enrich_line_max_chars
        return summary_messages(deal_name=name, mails=mails, max_chars=max_chars)

    def summarise(self, watch: OpenWatch, mails: list[MailText]) -> int:
        """Summarise one deal if its input changed; the number of model calls made (0 or 1)."""
        if not mails:
            self._done(watch.subject_id, "without_emails")
            return 0
        messages = self.messages(watch, mails)
        digest = input_hash(self.model.model, messages)
        with self.postgres.connection() as conn:
            latest = store.latest_input_hash(conn, watch.subject_id)
        if digest == latest:
            self._done(watch.subject_id, "unchanged")
            return 0
        answer = self.model.summarise(messages=messages)
        self.tokens.update(
            prompt_tokens=answer.usage.prompt_tokens,
            completion_tokens=answer.usage.completion_tokens,
        )
        self.keep(watch, answer, digest, source_text=messages[-1]["content"])
        return 1

    def refused(self, watch: OpenWatch, mails: list[MailText], error: PermanentError) -> None:
        """Mistral refused this input (400, 422): a review item, so it is not asked again."""
        messages = self.messages(watch, mails)
        with self.postgres.connection() as conn, conn.transaction():
            store.store_review_item(
                conn,
                subject_id=watch.subject_id,
                deal_name=watch.subject_name,
                input_hash=input_hash(self.model.model, messages),
                model=self.model.model,
                raw_output="",
                reason=f"Mistral refused the request: {error}",
                source_text=messages[-1]["content"],
                tokens=(None, None),
                now=self.now,
            )
            store.dequeue(conn, watch.subject_id)
        self.tally.problem(
            f"deal {watch.subject_id}: Mistral refused the request: {error}",
            error,
            item=f"deal {watch.subject_id}",
        )
        self.tally.count("sent_to_review")

    def keep(self, watch: OpenWatch, answer: ModelAnswer, digest: str, source_text: str) -> None:
        """Store the answer as the deal's summary, or as a review item saying why not."""
        context = SummaryContext(
            deal_name=watch.subject_name,
            source_text=source_text,
            max_chars=self.settings.enrich_line_max_chars,
        )
        reason = None
        if answer.finish_reason == "length":
            reason = "the answer was cut off at max_tokens"
        else:
            try:
                checked = check_summary(answer.text, context)
            except SummaryRejected as rejected:
                reason = rejected.reason
        usage = answer.usage
        with self.postgres.connection() as conn, conn.transaction():
            if reason is None:
                summary = NewSummary(
                    subject_id=watch.subject_id,
                    input_hash=digest,
                    line1=checked.line1,
                    line2=checked.line2,
                    model=answer.model,
                    prompt_tokens=usage.prompt_tokens,
                    completion_tokens=usage.completion_tokens,
                )
                store.store_summary(conn, summary, now=self.now)
            else:
                store.store_review_item(
                    conn,
                    subject_id=watch.subject_id,
                    deal_name=watch.subject_name,
                    input_hash=digest,
                    model=answer.model,
                    raw_output=answer.text,
                    reason=reason,
                    source_text=source_text,
                    tokens=(usage.prompt_tokens, usage.completion_tokens),
                    now=self.now,
                )
            store.dequeue(conn, watch.subject_id)
        self.tally.count("summarised" if reason is None else "sent_to_review")

    def _done(self, subject_id: str, why: str) -> None:
        with self.postgres.connection() as conn:
            store.dequeue(conn, subject_id)
        self.tally.count(why)
