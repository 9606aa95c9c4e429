package inboxbench.example;

import java.util.Arrays;
import java.util.List;

/** What inboxbench hands each instance through its environment (docs/services.md). */
record Config(
    String broker,
    String consumer,
    String jdbcUrl,
    String pgUser,
    String pgPassword,
    String rabbitUrl,
    List<String> queues,
    String kafkaBootstrap,
    String topic,
    String group,
    String deadLetter,
    Mistake mistake) {

  /** The two mistakes of the article this service can be switched to make. */
  enum Mistake {
    NONE,
    /** The inbox row commits on its own, apart from the business update. */
    SPLIT,
    /** The message is acknowledged (the offset committed) before the database commit. */
    ACK_BEFORE_COMMIT
  }

  static Config fromEnv() {
    String broker = need("INBOXBENCH_BROKER");
    boolean rabbit = broker.equals("rabbitmq");
    boolean kafka = broker.equals("kafka");
    if (!rabbit && !kafka) {
      throw new IllegalArgumentException("INBOXBENCH_BROKER=" + broker + ": this service consumes from rabbitmq or kafka");
    }
    return new Config(
        broker,
        need("INBOXBENCH_CONSUMER"),
        need("INBOXBENCH_PG_JDBC_URL"),
        need("INBOXBENCH_PG_USER"),
        System.getenv().getOrDefault("INBOXBENCH_PG_PASSWORD", ""),
        rabbit ? need("INBOXBENCH_RABBITMQ_URL") : null,
        rabbit ? Arrays.asList(need("INBOXBENCH_QUEUES").split(",")) : List.of(),
        kafka ? need("INBOXBENCH_KAFKA_BROKERS") : null,
        need("INBOXBENCH_TOPIC"),
        need("INBOXBENCH_GROUP"),
        need("INBOXBENCH_DEAD_LETTER"),
        mistake(System.getenv().getOrDefault("MISTAKE", "")));
  }

  private static Mistake mistake(String s) {
    return switch (s) {
      case "", "none" -> Mistake.NONE;
      case "split" -> Mistake.SPLIT;
      case "ack-before-commit" -> Mistake.ACK_BEFORE_COMMIT;
      default -> throw new IllegalArgumentException("MISTAKE=" + s + ": accepted are split, ack-before-commit, or empty");
    };
  }

  private static String need(String name) {
    String v = System.getenv(name);
    if (v == null || v.isEmpty()) {
      throw new IllegalArgumentException(name + " is not set: inboxbench sets it for each instance (docs/services.md)");
    }
    return v;
  }
}
