# Two entry points for a fresh machine (see README): `make demo` and `make test`.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
PY     := $(VENV)/bin/python

$(VENV)/.installed-%: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[$*]"
	touch $@

# Iceberg's Java library reading the view (tests/iceberg/test_view_java.py): a small reader built
# with Maven, its dependencies cached in ~/.m2 (later builds work offline: mvn -q -o package).
# Without Maven the Java test skips, saying so.
ICEBERG_JAVA := tests/iceberg/java/target/iceberg-view-reader-1.jar
$(ICEBERG_JAVA): tests/iceberg/java/pom.xml $(wildcard tests/iceberg/java/src/main/java/lamina/interop/*.java)
	cd tests/iceberg/java && (mvn -q -o package || mvn -q package)

iceberg-java:
	@if command -v mvn >/dev/null; then $(MAKE) $(ICEBERG_JAVA); else echo "no Maven (mvn): the Iceberg Java reader test will skip"; fi

# The tiers of the suite (markers: tests/conftest.py, pyproject.toml); `test-fast` is the
# edit-run loop: no Spark, PostgreSQL, S3 server, browser, model searches or slow tests.
# `test` (what CI runs) leaves out only the benchmark cases whose tiny run takes long (the cases
# registered with heavy=True in bench/: the marker bench_heavy); `test-bench` runs every case.
FAST := not (spark or postgres or s3 or browser or model or slow or bench_heavy)

.PHONY: demo test test-fast test-bench bench bench-tpch bench-spark test-radosgw interop-java-transforms iceberg-java s3a-jars
demo: $(VENV)/.installed-test,spark
	$(PY) -m lamina.demo

# The docs site is built first (into site/, in seconds): --strict fails on a broken link or
# anchor, or a page left out of the nav.
test: $(VENV)/.installed-test,spark,docs iceberg-java
	@$(MAKE) --no-print-directory s3a-jars
	$(PY) -m ruff check lamina
	$(PY) -m ruff format --check lamina
	$(PY) -m mypy
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --quiet
	$(PY) -m pytest -n 2 --dist loadgroup -q -m "not bench_heavy"

test-fast: $(VENV)/.installed-test,spark
	$(PY) -m pytest -n 2 --dist loadgroup -q -m "$(FAST)"

test-bench: $(VENV)/.installed-test,spark,bench
	@$(MAKE) --no-print-directory s3a-jars
	$(PY) -m pytest -n 2 --dist loadgroup -q tests/bench

bench: $(VENV)/.installed-bench
	$(PY) bench/run.py

# One case of bench/run.py each (`bench/run.py --list` lists them all): TPC-H at scale factor 1
# through DuckDB and Polars (bench/tpch_bench.py; the data is made by DuckDB's tpch extension,
# duckdb-extension-tpch in the bench extra), and Lamina's Spark paths, on local disk and on S3
# through S3A (bench/spark_bench.py, bench/spark_s3_bench.py: the S3A jars of `make s3a-jars`).
bench-tpch: $(VENV)/.installed-bench
	$(PY) bench/run.py tpch

bench-spark: $(VENV)/.installed-test,spark
	@$(MAKE) --no-print-directory s3a-jars
	$(PY) bench/run.py spark spark_s3

# Opt-in: the S3 tests against a real Ceph radosgw (needs: apt-get install -y radosgw ceph-mon ceph-osd).
test-radosgw: $(VENV)/.installed-test,spark
	LAMINA_S3_BACKEND=radosgw $(PY) -m pytest -q tests/io/test_s3.py
	@# a second run: the script's monitor port is fixed, and the first server's daemons exit asynchronously
	LAMINA_S3_BACKEND=radosgw $(PY) -m pytest -q \
		tests/spark/test_spark_catalog.py::test_catalog_table_on_s3_through_the_data_source_and_spark_compaction

# Iceberg's Java transforms, the reference tests/spec/test_transforms_iceberg.py checks Lamina's
# partition values against (needs a JDK 17 and Maven; the jars are cached in ~/.m2).
JAVA_TRANSFORMS := tests/interop/java/transforms
interop-java-transforms: $(JAVA_TRANSFORMS)/target/iceberg-transforms-1.jar
$(JAVA_TRANSFORMS)/target/iceberg-transforms-1.jar: $(JAVA_TRANSFORMS)/pom.xml $(wildcard $(JAVA_TRANSFORMS)/src/main/java/lamina/interop/*.java)
	mvn -q -B -f $(JAVA_TRANSFORMS)/pom.xml package

# Hadoop's S3A connector, for Spark's own Parquet reader and writer on s3:// tables (docs/spark.md,
# "Object stores"): hadoop-aws of the Hadoop PySpark ships (its hadoop-client-api jar) and the AWS
# SDK bundle and analytics accelerator of the versions hadoop-aws's build declares (its parent
# POM), fetched from the machine's Maven registry into JARS_DIR/hadoop-<version> once (cached:
# a later run finds them there; Maven keeps its own copy in ~/.m2). The tests' and benchmarks'
# Spark sessions put that directory's jars on the class path (tests/support/s3a_jars.py); a
# machine without Maven or the registry skips those tests, saying why. A failed fetch does not
# fail `make test`. `make test` and `make bench-spark` run it once PySpark is installed.
JARS_DIR ?= .cache/jars
HADOOP_VERSION = $(patsubst hadoop-client-api-%.jar,%,$(notdir $(firstword $(wildcard $(VENV)/lib/python*/site-packages/pyspark/jars/hadoop-client-api-*.jar))))
S3A_DIR = $(JARS_DIR)/hadoop-$(HADOOP_VERSION)
MVN_COPY = mvn -q -B dependency:copy -DoutputDirectory=$(S3A_DIR).part
s3a-jars:
	@if [ -z "$(HADOOP_VERSION)" ]; then echo "s3a-jars: no PySpark in $(VENV) (make test installs it): the S3A tests will be skipped"; exit 0; fi; \
	if [ -f $(S3A_DIR)/hadoop-aws-$(HADOOP_VERSION).jar ]; then exit 0; fi; \
	if ! command -v mvn >/dev/null 2>&1; then echo "s3a-jars: no mvn on this machine: the S3A tests will be skipped"; exit 0; fi; \
	rm -rf $(S3A_DIR).part && mkdir -p $(S3A_DIR).part && \
	mvn -q -B dependency:copy -Dartifact=org.apache.hadoop:hadoop-project:$(HADOOP_VERSION):pom -DoutputDirectory=$(S3A_DIR).part && \
	pom=$(S3A_DIR).part/hadoop-project-$(HADOOP_VERSION).pom && \
	sdk=$$(sed -n 's:.*<aws-java-sdk-v2.version>\(.*\)</aws-java-sdk-v2.version>.*:\1:p' $$pom) && \
	aal=$$(sed -n 's:.*<amazon-s3-analyticsaccelerator-s3.version>\(.*\)</amazon-s3-analyticsaccelerator-s3.version>.*:\1:p' $$pom) && \
	rm $$pom && \
	$(MVN_COPY) -Dartifact=software.amazon.awssdk:bundle:$$sdk && \
	if [ -n "$$aal" ]; then $(MVN_COPY) -Dartifact=software.amazon.s3.analyticsaccelerator:analyticsaccelerator-s3:$$aal; fi && \
	$(MVN_COPY) -Dartifact=org.apache.hadoop:hadoop-aws:$(HADOOP_VERSION) && \
	rm -rf $(S3A_DIR) && mv $(S3A_DIR).part $(S3A_DIR) \
	|| echo "s3a-jars: could not fetch hadoop-aws $(HADOOP_VERSION) and its AWS SDK from Maven: the S3A tests will be skipped"
