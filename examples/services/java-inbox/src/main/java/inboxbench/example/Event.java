package inboxbench.example;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

/**
 * The CloudEvents 1.0 attributes the inbox needs, from the structured JSON
 * body inboxbench publishes. Identity is (source, id); subject is the
 * aggregate; aggregateversion orders one aggregate's events.
 */
record Event(String source, String id, String aggregate, long version, boolean snapshot, long amount) {

  private static final ObjectMapper JSON = new ObjectMapper();

  /** Thrown for a body that is not such an event: poison, never retried. */
  static final class Malformed extends Exception {
    Malformed(String why) {
      super(why);
    }
  }

  static Event parse(byte[] body) throws Malformed {
    JsonNode n;
    try {
      n = JSON.readTree(body);
    } catch (Exception e) {
      throw new Malformed("not JSON: " + e.getMessage());
    }
    if (n == null || !n.isObject() || !"1.0".equals(text(n, "specversion"))) {
      throw new Malformed("not a CloudEvents 1.0 structured event");
    }
    String kind = text(n, "kind");
    if (!"increment".equals(kind) && !"snapshot".equals(kind)) {
      throw new Malformed("kind " + kind + ": increment or snapshot");
    }
    String source = text(n, "source"), id = text(n, "id"), subject = text(n, "subject");
    if (source == null || id == null || subject == null || !n.path("aggregateversion").canConvertToLong() || !n.path("amount").canConvertToLong()) {
      throw new Malformed("source, id, subject, aggregateversion and amount are required");
    }
    long version = n.get("aggregateversion").asLong();
    if (version < 1) {
      throw new Malformed("aggregateversion " + version + ": versions start at 1");
    }
    return new Event(source, id, subject, version, "snapshot".equals(kind), n.get("amount").asLong());
  }

  private static String text(JsonNode n, String field) {
    JsonNode v = n.get(field);
    return v != null && v.isTextual() ? v.asText() : null;
  }
}
