"""Across runs and models: pooling, the consensus and its verdict, corrections, the agreement table."""
