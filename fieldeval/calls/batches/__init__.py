"""``--batch``: provider batch APIs for a session's uncached calls (:mod:`fieldeval.calls.batches.rounds`), the
batches recorded in the response cache (:mod:`~fieldeval.calls.batches.ledger`), the two APIs over HTTP
(:mod:`~fieldeval.calls.batches.providers`) and ``fieldeval batches`` (:mod:`~fieldeval.calls.batches.cli`)."""
