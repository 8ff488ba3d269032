"""Model calls: the client, the solver pool, limits, failure classes, the response cache, endpoints."""
