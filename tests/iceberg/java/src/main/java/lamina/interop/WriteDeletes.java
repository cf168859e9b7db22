package lamina.interop;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.apache.hadoop.conf.Configuration;
import org.apache.iceberg.AppendFiles;
import org.apache.iceberg.DataFile;
import org.apache.iceberg.DeleteFile;
import org.apache.iceberg.FileFormat;
import org.apache.iceberg.PartitionSpec;
import org.apache.iceberg.RowDelta;
import org.apache.iceberg.Schema;
import org.apache.iceberg.Table;
import org.apache.iceberg.data.GenericAppenderFactory;
import org.apache.iceberg.data.GenericRecord;
import org.apache.iceberg.data.Record;
import org.apache.iceberg.deletes.BaseDVFileWriter;
import org.apache.iceberg.deletes.EqualityDeleteWriter;
import org.apache.iceberg.deletes.PositionDelete;
import org.apache.iceberg.deletes.PositionDeleteWriter;
import org.apache.iceberg.encryption.EncryptedFiles;
import org.apache.iceberg.encryption.EncryptedOutputFile;
import org.apache.iceberg.hadoop.HadoopTables;
import org.apache.iceberg.io.DataWriter;
import org.apache.iceberg.io.OutputFileFactory;
import org.apache.iceberg.types.Types;

/**
 * Writes Iceberg tables with merge-on-read deletes as Iceberg's Java library writes them (the
 * engines built on it, Spark and Flink, write the same files): format v2 with position-delete
 * files, format v3 with deletion vectors in Puffin files, and format v2 with equality deletes.
 * pyiceberg deletes copy-on-write only, so these are the real sources of deletes a conversion
 * must read. Input on stdin: a JSON list of {location, kind: position|dv|equality, files:
 * [[id, ...], ...], deleted: [[position, ...], ...]} (deleted positions per data file; for
 * equality, the ids to delete in deleted[0]); output: a JSON list of {metadata} or {error}.
 */
public final class WriteDeletes {
  private static final Schema SCHEMA =
      new Schema(
          Types.NestedField.required(1, "id", Types.LongType.get()),
          Types.NestedField.optional(2, "s", Types.StringType.get()));

  public static void main(String[] args) throws Exception {
    ObjectMapper json = new ObjectMapper();
    JsonNode requests = json.readTree(System.in);
    ArrayNode out = json.createArrayNode();
    HadoopTables tables = new HadoopTables(new Configuration());
    for (JsonNode r : requests) {
      ObjectNode answer = out.addObject();
      try {
        String kind = r.get("kind").asText();
        String version = kind.equals("dv") ? "3" : "2";
        Table table =
            tables.create(
                SCHEMA,
                PartitionSpec.unpartitioned(),
                Map.of("format-version", version, "write.delete.mode", "merge-on-read"),
                r.get("location").asText());
        GenericAppenderFactory factory = new GenericAppenderFactory(SCHEMA, table.spec());
        List<DataFile> files = new ArrayList<>();
        AppendFiles append = table.newAppend();
        int n = 0;
        for (JsonNode ids : r.get("files")) {
          DataWriter<Record> writer = factory.newDataWriter(output(table, "data-" + n++ + ".parquet"), FileFormat.PARQUET, null);
          for (JsonNode id : ids) {
            GenericRecord rec = GenericRecord.create(SCHEMA);
            rec.setField("id", id.asLong());
            rec.setField("s", "v" + id.asLong());
            writer.write(rec);
          }
          writer.close();
          files.add(writer.toDataFile());
          append.appendFile(writer.toDataFile());
        }
        append.commit();
        RowDelta delta = table.newRowDelta();
        JsonNode deleted = r.get("deleted");
        if (kind.equals("position")) {
          PositionDeleteWriter<Record> writer =
              factory.newPosDeleteWriter(output(table, "deletes.parquet"), FileFormat.PARQUET, null);
          PositionDelete<Record> row = PositionDelete.create();
          for (int i = 0; i < files.size(); i++) {
            for (JsonNode pos : deleted.get(i)) {
              writer.write(row.set(files.get(i).location(), pos.asLong(), null));
            }
          }
          writer.close();
          delta.addDeletes(writer.toDeleteFile());
        } else if (kind.equals("dv")) {
          OutputFileFactory names = OutputFileFactory.builderFor(table, 1, 1).format(FileFormat.PUFFIN).build();
          BaseDVFileWriter writer = new BaseDVFileWriter(names, path -> null);
          for (int i = 0; i < files.size(); i++) {
            for (JsonNode pos : deleted.get(i)) {
              writer.delete(files.get(i).location(), pos.asLong(), table.spec(), null);
            }
          }
          writer.close();
          for (DeleteFile d : writer.result().deleteFiles()) {
            delta.addDeletes(d);
          }
        } else {
          Schema idOnly = SCHEMA.select("id");
          GenericAppenderFactory eq =
              new GenericAppenderFactory(SCHEMA, table.spec(), new int[] {1}, idOnly, null);
          EqualityDeleteWriter<Record> writer =
              eq.newEqDeleteWriter(output(table, "eq-deletes.parquet"), FileFormat.PARQUET, null);
          for (JsonNode id : deleted.get(0)) {
            GenericRecord rec = GenericRecord.create(idOnly);
            rec.setField("id", id.asLong());
            writer.write(rec);
          }
          writer.close();
          delta.addDeletes(writer.toDeleteFile());
        }
        delta.commit();
        answer.put("metadata", ((org.apache.iceberg.HasTableOperations) table).operations().current().metadataFileLocation());
      } catch (Exception e) {
        answer.put("error", e.toString());
      }
    }
    System.out.println(json.writeValueAsString(out));
  }

  private static EncryptedOutputFile output(Table table, String name) {
    return EncryptedFiles.plainAsEncryptedOutput(table.io().newOutputFile(table.location() + "/data/" + name));
  }
}
