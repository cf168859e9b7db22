"""Root and leaf manifests (Parquet), content entries, the adaptive manifest tree."""
