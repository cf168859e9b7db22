package lamina.interop;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.math.BigDecimal;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.HexFormat;
import java.util.UUID;
import org.apache.iceberg.transforms.Transform;
import org.apache.iceberg.types.Type;
import org.apache.iceberg.types.Types;
import org.apache.iceberg.util.SerializableFunction;

/**
 * Iceberg's own transforms applied to vectors read from stdin, one per line:
 * {@code <iceberg type> TAB <transform> TAB <value>}, the value as text (integers, dates
 * as days, times and timestamps in their unit since midnight or the epoch, decimals as
 * plain text, strings and binaries as hex of their bytes, uuids canonical). Prints one line
 * per vector: {@code <result type> TAB <result>} in the same encoding, {@code null} for a
 * null result, or {@code error TAB <message>} where Iceberg refuses the value.
 */
public final class Transforms {
  private static final HexFormat HEX = HexFormat.of();

  private Transforms() {}

  public static void main(String[] args) throws Exception {
    PrintStream out = new PrintStream(System.out, false, StandardCharsets.UTF_8);
    BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    String line;
    while ((line = in.readLine()) != null) {
      if (line.isEmpty()) {
        continue;
      }
      String[] parts = line.split("\t", 3);
      try {
        Type type = Types.fromPrimitiveString(parts[0]);
        @SuppressWarnings("unchecked")
        Transform<Object, Object> transform =
            (Transform<Object, Object>) org.apache.iceberg.transforms.Transforms.fromString(type, parts[1]);
        SerializableFunction<Object, Object> fn = transform.bind(type);
        Type resultType = transform.getResultType(type);
        Object result = fn.apply(parse(type, parts[2]));
        out.println(resultType + "\t" + format(result));
      } catch (RuntimeException e) {
        out.println("error\t" + e.getClass().getSimpleName() + ": " + String.valueOf(e.getMessage()).replace('\n', ' '));
      }
    }
    out.flush();
  }

  private static Object parse(Type type, String text) {
    if (text.equals("null")) {
      return null;
    }
    switch (type.typeId()) {
      case INTEGER:
      case DATE:
        return Integer.parseInt(text);
      case LONG:
      case TIME:
      case TIMESTAMP:
      case TIMESTAMP_NANO:
        return Long.parseLong(text);
      case DECIMAL:
        return new BigDecimal(text);
      case STRING:
        return new String(HEX.parseHex(text), StandardCharsets.UTF_8);
      case BINARY:
      case FIXED:
        return ByteBuffer.wrap(HEX.parseHex(text));
      case UUID:
        return UUID.fromString(text);
      default:
        throw new IllegalArgumentException("no vector encoding for " + type);
    }
  }

  private static String format(Object v) {
    if (v == null) {
      return "null";
    }
    if (v instanceof BigDecimal) {
      return ((BigDecimal) v).toPlainString();
    }
    if (v instanceof CharSequence) {
      return HEX.formatHex(v.toString().getBytes(StandardCharsets.UTF_8));
    }
    if (v instanceof ByteBuffer) {
      ByteBuffer b = ((ByteBuffer) v).duplicate();
      byte[] bytes = new byte[b.remaining()];
      b.get(bytes);
      return HEX.formatHex(bytes);
    }
    return v.toString();
  }
}
