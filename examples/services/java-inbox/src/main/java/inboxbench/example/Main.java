package inboxbench.example;

import java.util.concurrent.CountDownLatch;

/**
 * An inbox consumer service as a team would write one, for inboxbench to
 * put under test from outside (docs/services.md). It reads where to consume
 * and where to write from the environment, prints one line when it is
 * consuming, and stops on SIGTERM.
 */
public final class Main {

  public static void main(String[] args) throws Exception {
    Config cfg;
    try {
      cfg = Config.fromEnv();
    } catch (IllegalArgumentException e) {
      System.err.println("java-inbox: " + e.getMessage());
      System.exit(2);
      return;
    }
    String what = "broker=" + cfg.broker() + " consumer=" + cfg.consumer() + " mistake=" + cfg.mistake().name().toLowerCase();
    if (cfg.broker().equals("rabbitmq")) {
      RabbitService s = new RabbitService(cfg);
      CountDownLatch stop = new CountDownLatch(1);
      Runtime.getRuntime().addShutdownHook(new Thread(() -> {
        s.close();
        stop.countDown();
      }));
      System.out.println("java-inbox ready: " + what);
      stop.await();
      return;
    }
    KafkaService s = new KafkaService(cfg);
    Thread main = Thread.currentThread();
    Runtime.getRuntime().addShutdownHook(new Thread(() -> {
      s.wakeup();
      try {
        main.join(10_000);
      } catch (InterruptedException ignored) {
        Thread.currentThread().interrupt();
      }
    }));
    System.out.println("java-inbox ready: " + what);
    try {
      s.run();
    } finally {
      s.close();
    }
  }
}
