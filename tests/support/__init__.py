"""What the tests share that is not a test: local servers and proxies (PostgreSQL, S3,
fault-injecting network), subprocess workers, and the small sample tables several test
files build on. Imported as ``from support.<module> import ...`` (the root conftest puts
tests/ on sys.path).
"""

# The bucket the ``s3`` fixture (conftest) creates on the local S3 server. Here rather than
# in support.s3server, which imports moto: a test file naming the bucket stays cheap to collect.
BUCKET = "lamina-test"
