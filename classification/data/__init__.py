"""Datasets of the classification pipeline."""
