"""Storage: one obstore-backed FileIO for local disk, memory:// and s3:// (``fileio``), with the
rule for paths inside a table (``paths``), the S3 settings (``s3``) and what store errors mean
(``store_errors``)."""

from lamina.io.fileio import FileIO, ObjectInfo

__all__ = ["FileIO", "ObjectInfo"]
