package lamina.interop;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.nio.ByteBuffer;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import org.apache.hadoop.conf.Configuration;
import org.apache.iceberg.BaseTable;
import org.apache.iceberg.FileScanTask;
import org.apache.iceberg.MetadataColumns;
import org.apache.iceberg.Schema;
import org.apache.iceberg.StaticTableOperations;
import org.apache.iceberg.Table;
import org.apache.iceberg.TableProperties;
import org.apache.iceberg.TableScan;
import org.apache.iceberg.data.GenericDeleteFilter;
import org.apache.iceberg.data.IdentityPartitionConverters;
import org.apache.iceberg.data.InternalRecordWrapper;
import org.apache.iceberg.data.Record;
import org.apache.iceberg.data.parquet.GenericParquetReaders;
import org.apache.iceberg.expressions.Evaluator;
import org.apache.iceberg.expressions.Expressions;
import org.apache.iceberg.hadoop.HadoopFileIO;
import org.apache.iceberg.io.CloseableIterable;
import org.apache.iceberg.mapping.NameMapping;
import org.apache.iceberg.mapping.NameMappingParser;
import org.apache.iceberg.parquet.Parquet;
import org.apache.iceberg.types.Types;
import org.apache.iceberg.util.PartitionUtil;

/**
 * Reads snapshots of Iceberg tables with Iceberg's own Java readers, as engines built on the
 * library do (Spark's reader): scan planning with the manifests' statistics, Parquet read by
 * field id or, for files without ids, through the table's name mapping
 * (schema.name-mapping.default; IcebergGenerics alone does not apply it), deletion vectors
 * applied by the delete filter, and the residual filter. Input on stdin: a JSON list of
 * {metadata, snapshot_id, min_id}; output on stdout: a JSON list of {rows, files} or {error}.
 */
public final class ReadView {
  public static void main(String[] args) throws Exception {
    ObjectMapper json = new ObjectMapper();
    JsonNode queries = json.readTree(System.in);
    ArrayNode out = json.createArrayNode();
    HadoopFileIO io = new HadoopFileIO(new Configuration());
    for (JsonNode q : queries) {
      ObjectNode answer = out.addObject();
      try {
        Table table = new BaseTable(new StaticTableOperations(q.get("metadata").asText(), io), "view");
        long snapshot = q.get("snapshot_id").asLong();
        TableScan scan = table.newScan().useSnapshot(snapshot);
        if (q.hasNonNull("min_id")) {
          scan = scan.filter(Expressions.greaterThanOrEqual("id", q.get("min_id").asLong()));
        }
        String mappingJson = table.properties().get(TableProperties.DEFAULT_NAME_MAPPING);
        NameMapping mapping = mappingJson == null ? null : NameMappingParser.fromJson(mappingJson);
        Schema schema = scan.schema();
        ArrayNode rows = answer.putArray("rows");
        ArrayNode files = answer.putArray("files");
        try (CloseableIterable<FileScanTask> tasks = scan.planFiles()) {
          for (FileScanTask task : tasks) {
            files.add(task.file().location());
            read(table, io, task, schema, mapping, rows);
          }
        }
      } catch (Exception e) {
        answer.put("error", e.getClass().getName() + ": " + e.getMessage());
      }
    }
    json.writeValue(System.out, out);
  }

  private static void read(Table table, HadoopFileIO io, FileScanTask task, Schema schema, NameMapping mapping,
                           ArrayNode rows) throws Exception {
    GenericDeleteFilter deletes = new GenericDeleteFilter(io, task, table.schema(), schema);
    Schema required = deletes.requiredSchema();
    Map<Integer, ?> constants = PartitionUtil.constantsMap(task, IdentityPartitionConverters::convertConstant);
    Parquet.ReadBuilder builder = Parquet.read(io.newInputFile(task.file().location()))
        .project(required)
        .split(task.start(), task.length())
        .filter(task.residual())
        .createReaderFunc(fileSchema -> GenericParquetReaders.buildReader(required, fileSchema, constants));
    if (mapping != null) {
      builder = builder.withNameMapping(mapping);
    }
    Evaluator residual = new Evaluator(required.asStruct(), task.residual(), true);
    InternalRecordWrapper wrap = new InternalRecordWrapper(required.asStruct());
    try (CloseableIterable<Record> records = deletes.filter(builder.<Record>build())) {
      for (Record r : records) {
        if (!residual.eval(wrap.wrap(r))) {
          continue;
        }
        ObjectNode row = rows.addObject();
        for (Types.NestedField f : schema.columns()) {
          put(row, f.name(), r.getField(f.name()));
        }
      }
    }
  }

  private static void put(ObjectNode row, String name, Object v) {
    if (v == null) {
      row.putNull(name);
    } else if (v instanceof Long || v instanceof Integer) {
      row.put(name, ((Number) v).longValue());
    } else if (v instanceof Double || v instanceof Float) {
      row.put(name, ((Number) v).doubleValue());
    } else if (v instanceof Boolean) {
      row.put(name, (Boolean) v);
    } else if (v instanceof ByteBuffer) {
      ByteBuffer b = ((ByteBuffer) v).duplicate();
      byte[] bytes = new byte[b.remaining()];
      b.get(bytes);
      row.put(name, HexFormat.of().formatHex(bytes));
    } else {
      row.put(name, v.toString());
    }
  }

  private ReadView() {}
}
