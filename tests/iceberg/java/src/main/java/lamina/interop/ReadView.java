package lamina.interop;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;
import org.apache.hadoop.conf.Configuration;
import org.apache.iceberg.BaseTable;
import org.apache.iceberg.MetadataColumns;
import org.apache.iceberg.StaticTableOperations;
import org.apache.iceberg.Table;
import org.apache.iceberg.data.IcebergGenerics;
import org.apache.iceberg.data.Record;
import org.apache.iceberg.expressions.Expressions;
import org.apache.iceberg.hadoop.HadoopFileIO;
import org.apache.iceberg.io.CloseableIterable;
import org.apache.iceberg.types.Types;

/**
 * Reads snapshots of Iceberg tables with Iceberg's own Java readers (IcebergGenerics: manifests,
 * deletion vectors, schema evolution by field id and name mapping). Input on stdin: a JSON list
 * of {metadata, snapshot_id, min_id}; output on stdout: a JSON list of {rows, files} or {error}.
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
        IcebergGenerics.ScanBuilder scan = IcebergGenerics.read(table).useSnapshot(snapshot);

        if (q.hasNonNull("min_id")) {
          scan = scan.where(Expressions.greaterThanOrEqual("id", q.get("min_id").asLong()));
        }
        ArrayNode rows = answer.putArray("rows");
        try (CloseableIterable<Record> records = scan.build()) {
          for (Record r : records) {
            ObjectNode row = rows.addObject();
            List<Types.NestedField> fields = r.struct().fields();
            for (int i = 0; i < fields.size(); i++) {
              Object v = r.get(i);
              String name = fields.get(i).name();
              if (name.equals(MetadataColumns.ROW_POSITION.name())) {
                continue; // added by the reader to apply deletion vectors
              }
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
                row.put(name, java.util.HexFormat.of().formatHex(bytes));
              } else {
                row.put(name, v.toString());
              }
            }
          }
        }
        List<String> files = new ArrayList<>();
        org.apache.iceberg.TableScan plan = table.newScan().useSnapshot(snapshot);
        if (q.hasNonNull("min_id")) {
          plan = plan.filter(Expressions.greaterThanOrEqual("id", q.get("min_id").asLong()));
        }
        plan.planFiles().forEach(t -> files.add(t.file().location()));
        ArrayNode planned = answer.putArray("files");
        files.forEach(planned::add);
      } catch (Exception e) {
        answer.put("error", e.getClass().getName() + ": " + e.getMessage());
      }
    }
    json.writeValue(System.out, out);
  }
}
