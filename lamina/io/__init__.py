"""Storage: one obstore-backed FileIO for local disk, memory:// and s3://."""

from lamina.io.fileio import FileIO, ObjectInfo

__all__ = ["FileIO", "ObjectInfo"]
