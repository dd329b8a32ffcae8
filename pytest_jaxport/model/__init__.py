"""Pure logic: values in, values out; imports neither JAX nor pytest."""
