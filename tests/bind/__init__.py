"""The bind stage: bindings as typed, keyed results, binders static and running."""
