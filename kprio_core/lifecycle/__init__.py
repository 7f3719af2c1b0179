"""The life of a batch as pure rules: what a tick launches, what a run of a batch does."""
