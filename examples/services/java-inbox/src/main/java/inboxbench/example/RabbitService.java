package inboxbench.example;

import com.rabbitmq.client.AMQP;
import com.rabbitmq.client.Channel;
import com.rabbitmq.client.Connection;
import com.rabbitmq.client.ConnectionFactory;
import com.rabbitmq.client.DefaultConsumer;
import com.rabbitmq.client.Envelope;
import java.io.IOException;
import java.util.ArrayList;
import java.util.List;

/**
 * Consumes every shard queue inboxbench declared for the cell (each queue
 * single-active-consumer, so one instance at a time holds it), one channel
 * and one database connection per queue, manual acks after the commit.
 */
final class RabbitService implements AutoCloseable {

  private static final int PREFETCH = 64;

  private final Config cfg;
  private final Connection conn;
  private final List<Inbox> inboxes = new ArrayList<>();

  RabbitService(Config cfg) throws Exception {
    this.cfg = cfg;
    ConnectionFactory f = new ConnectionFactory();
    f.setUri(cfg.rabbitUrl());
    f.setAutomaticRecoveryEnabled(true); // reconnect, redeclare the consumers
    f.setNetworkRecoveryInterval(1000);
    f.setRequestedHeartbeat(10);
    conn = f.newConnection("inboxbench-java-example");
    for (String queue : cfg.queues()) {
      Channel ch = conn.createChannel();
      ch.basicQos(PREFETCH);
      Inbox inbox = new Inbox(cfg);
      inboxes.add(inbox);
      ch.basicConsume(queue, false, new QueueConsumer(ch, inbox));
    }
  }

  private final class QueueConsumer extends DefaultConsumer {
    private final Inbox inbox;

    QueueConsumer(Channel ch, Inbox inbox) {
      super(ch);
      this.inbox = inbox;
    }

    @Override
    public void handleDelivery(String tag, Envelope env, AMQP.BasicProperties props, byte[] body) throws IOException {
      long dt = env.getDeliveryTag();
      Event e;
      try {
        e = Event.parse(body);
      } catch (Event.Malformed m) {
        System.err.println("poison message " + props.getMessageId() + ": " + m.getMessage() + " (dead-lettered)");
        getChannel().basicReject(dt, false); // the queue dead-letters it
        return;
      }
      if (cfg.mistake() == Config.Mistake.ACK_BEFORE_COMMIT) {
        getChannel().basicAck(dt, false); // the mistake: settled before the work is durable
        inbox.applyOnce(e); // a gap or a failure now loses the event
        return;
      }
      Inbox.Outcome o;
      try {
        o = inbox.applyRetrying(e);
      } catch (InterruptedException ie) {
        Thread.currentThread().interrupt();
        return; // shutting down: unacked, so redelivered
      }
      if (o == Inbox.Outcome.GAP) {
        // Its predecessor is behind it in the queue: back of the queue,
        // after a pause so a gap does not spin.
        Inbox.sleep(20);
        getChannel().basicNack(dt, false, true);
        return;
      }
      getChannel().basicAck(dt, false);
    }
  }

  @Override
  public void close() {
    try {
      conn.close(5000);
    } catch (Exception ignored) {
      // the connection is gone already
    }
    inboxes.forEach(Inbox::close);
  }
}
