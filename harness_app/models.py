"""Corpora, documents, benchmarks, queries, qrels and policy configs live here."""
