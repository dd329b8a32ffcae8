"""The only code that imports JAX (moving here piece by piece)."""
