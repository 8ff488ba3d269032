-- The SQLite schema fieldeval/store.py created before the store package (schema_version 1, IBF columns
-- wired into evaluations and evaluation_responses); tests open a store made from it with the package.
CREATE TABLE schema_version (
    version INTEGER NOT NULL,
    description TEXT NOT NULL,
    applied_at DATETIME NOT NULL,
    PRIMARY KEY (version)
);
CREATE TABLE models (
    model_id TEXT NOT NULL,
    name TEXT NOT NULL,
    provider TEXT,
    endpoint TEXT NOT NULL,
    context_window INTEGER,
    parameters_billion FLOAT,
    notes TEXT,
    registered_at DATETIME NOT NULL,
    PRIMARY KEY (model_id),
    CONSTRAINT uq_models_name_endpoint UNIQUE (name, endpoint)
);
CREATE TABLE evaluations (
    run_id TEXT NOT NULL,
    model_id TEXT,
    label TEXT,
    benchmarks JSON NOT NULL,
    models JSON NOT NULL,
    corpus_version TEXT,
    content_hash TEXT,
    ontology_version TEXT,
    git_commit TEXT,
    status TEXT DEFAULT 'completed' NOT NULL,
    total_items INTEGER,
    hazard_recognition FLOAT,
    impact_reasoning FLOAT,
    uncertainty_handling FLOAT,
    action_relevance FLOAT,
    geographic_specificity FLOAT,
    mean_dimension_score FLOAT,
    threshold_pass_rate FLOAT,
    totals JSON,
    payload JSON NOT NULL,
    created_at DATETIME NOT NULL,
    completed_at DATETIME,
    PRIMARY KEY (run_id),
    FOREIGN KEY(model_id) REFERENCES models (model_id) ON DELETE SET NULL
);
CREATE INDEX ix_evaluations_created ON evaluations (created_at);
CREATE TABLE evaluation_benchmarks (
    run_id TEXT NOT NULL,
    benchmark TEXT NOT NULL,
    corpus_version TEXT,
    content_hash TEXT,
    headline JSON NOT NULL,
    total_items INTEGER,
    PRIMARY KEY (run_id, benchmark),
    FOREIGN KEY(run_id) REFERENCES evaluations (run_id) ON DELETE CASCADE
);
CREATE TABLE evaluation_metrics (
    run_id TEXT NOT NULL,
    benchmark TEXT NOT NULL,
    model TEXT NOT NULL,
    metric TEXT NOT NULL,
    value FLOAT,
    ci_lo FLOAT,
    ci_hi FLOAT,
    n INTEGER,
    PRIMARY KEY (run_id, benchmark, model, metric),
    FOREIGN KEY(run_id) REFERENCES evaluations (run_id) ON DELETE CASCADE
);
CREATE TABLE evaluation_responses (
    response_id INTEGER NOT NULL,
    run_id TEXT NOT NULL,
    benchmark TEXT NOT NULL,
    model TEXT NOT NULL,
    corpus_item_id TEXT NOT NULL,
    raw_response TEXT,
    hazard_recognition SMALLINT,
    impact_reasoning SMALLINT,
    uncertainty_handling SMALLINT,
    action_relevance SMALLINT,
    geographic_specificity SMALLINT,
    metrics JSON,
    response_time_s FLOAT,
    prompt_tokens INTEGER,
    completion_tokens INTEGER,
    est_cost_usd FLOAT,
    cached BOOLEAN,
    scored_at DATETIME,
    PRIMARY KEY (response_id),
    FOREIGN KEY(run_id) REFERENCES evaluations (run_id) ON DELETE CASCADE
);
CREATE INDEX ix_evaluation_responses_run ON evaluation_responses (run_id, benchmark, model);
