"""The on-disk model: version manifests, hint, feature flags, schema, partitioning, layout."""
