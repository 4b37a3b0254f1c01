"""Evals you can compare: a batch's figures with their noise, two batches paired by
task, and the manifest that says what a batch pinned. Pure (no Temporal): the CLI
(`episodes compare`) and the viewer read the batches and hand the outcomes here."""
