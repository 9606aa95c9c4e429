package inboxbench.example;

import java.time.Duration;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.WakeupException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * One consumer of the cell's group, one thread, one database connection.
 * Records are handled in partition order; an event whose predecessor has
 * not taken effect is held in memory (parked) until it has, and no offset
 * is committed past a parked record, so a crash delivers it again. Offsets
 * are committed after the database commits, never before.
 */
final class KafkaService implements AutoCloseable {

  private record Parked(TopicPartition tp, long offset, Event event) {}

  private final Config cfg;
  private final Inbox inbox;
  private final KafkaConsumer<byte[], byte[]> consumer;
  private final KafkaProducer<byte[], byte[]> deadLetters;
  /** Per partition: the next offset to commit if nothing is parked, and the parked offsets. */
  private final Map<TopicPartition, Long> next = new HashMap<>();
  private final Map<TopicPartition, TreeMap<Long, Parked>> parkedAt = new HashMap<>();
  /** Per aggregate: its parked events by version. */
  private final Map<String, TreeMap<Long, Parked>> parked = new HashMap<>();

  KafkaService(Config cfg) throws Exception {
    this.cfg = cfg;
    this.inbox = new Inbox(cfg);
    Properties p = new Properties();
    p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, cfg.kafkaBootstrap());
    p.put(ConsumerConfig.GROUP_ID_CONFIG, cfg.group());
    p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
    p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
    p.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "200");
    // A dead instance's partitions move after 10 s instead of the 45 s
    // default (service.yaml's handover says so).
    p.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, "10000");
    p.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, "3000");
    p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
    p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
    consumer = new KafkaConsumer<>(p);
    Properties pp = new Properties();
    pp.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, cfg.kafkaBootstrap());
    pp.put(ProducerConfig.ACKS_CONFIG, "all");
    pp.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
    pp.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
    deadLetters = new KafkaProducer<>(pp);
    consumer.subscribe(List.of(cfg.topic()), new ConsumerRebalanceListener() {
      @Override
      public void onPartitionsRevoked(Collection<TopicPartition> parts) {
        commit(); // what is done stays done
        forget(parts);
      }

      @Override
      public void onPartitionsAssigned(Collection<TopicPartition> parts) {}
    });
  }

  /** Polls and handles records until the consumer is woken up. */
  void run() throws InterruptedException {
    try {
      while (true) {
        ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(200));
        if (cfg.mistake() == Config.Mistake.ACK_BEFORE_COMMIT && !records.isEmpty()) {
          // The mistake: the polled position is committed before the work.
          Map<TopicPartition, OffsetAndMetadata> polled = new HashMap<>();
          for (TopicPartition tp : records.partitions()) {
            List<ConsumerRecord<byte[], byte[]>> rs = records.records(tp);
            polled.put(tp, new OffsetAndMetadata(rs.get(rs.size() - 1).offset() + 1));
          }
          commitQuietly(polled);
        }
        for (ConsumerRecord<byte[], byte[]> r : records) {
          handle(new TopicPartition(r.topic(), r.partition()), r);
        }
        if (cfg.mistake() != Config.Mistake.ACK_BEFORE_COMMIT) {
          commit();
        }
      }
    } catch (WakeupException stop) {
      commit();
    }
  }

  private void handle(TopicPartition tp, ConsumerRecord<byte[], byte[]> r) throws InterruptedException {
    Event e;
    try {
      e = Event.parse(r.value());
    } catch (Event.Malformed m) {
      System.err.println("poison record " + tp + "@" + r.offset() + ": " + m.getMessage() + " (dead-lettered)");
      try {
        deadLetters.send(new ProducerRecord<>(cfg.deadLetter(), r.key(), r.value())).get();
      } catch (Exception err) {
        throw new IllegalStateException("dead-letter " + tp + "@" + r.offset() + ": " + err.getMessage(), err);
      }
      done(tp, r.offset());
      return;
    }
    Inbox.Outcome o = cfg.mistake() == Config.Mistake.ACK_BEFORE_COMMIT ? inbox.applyOnce(e) : inbox.applyRetrying(e);
    if (o == null) {
      done(tp, r.offset()); // its offset was committed before: dropped
      return;
    }
    if (o == Inbox.Outcome.GAP) {
      Parked p = new Parked(tp, r.offset(), e);
      parked.computeIfAbsent(e.aggregate(), k -> new TreeMap<>()).put(e.version(), p);
      parkedAt.computeIfAbsent(tp, k -> new TreeMap<>()).put(r.offset(), p);
      next.merge(tp, r.offset() + 1, Math::max);
      return;
    }
    done(tp, r.offset());
    if (o == Inbox.Outcome.APPLIED) {
      drain(e.aggregate(), e.version() + 1);
    }
  }

  /** Applies the parked successors of an aggregate whose turn has come. */
  private void drain(String aggregate, long version) throws InterruptedException {
    TreeMap<Long, Parked> waiting = parked.get(aggregate);
    while (waiting != null && waiting.containsKey(version)) {
      Parked p = waiting.get(version);
      Inbox.Outcome o = inbox.applyRetrying(p.event());
      if (o == Inbox.Outcome.GAP) {
        return;
      }
      waiting.remove(version);
      parkedAt.get(p.tp()).remove(p.offset());
      version++;
    }
    if (waiting != null && waiting.isEmpty()) {
      parked.remove(aggregate);
    }
  }

  private void done(TopicPartition tp, long offset) {
    next.merge(tp, offset + 1, Math::max);
  }

  /** Commits, per partition, up to the first parked record, or past the last handled one. */
  private void commit() {
    Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
    for (Map.Entry<TopicPartition, Long> n : next.entrySet()) {
      TreeMap<Long, Parked> held = parkedAt.get(n.getKey());
      long at = held == null || held.isEmpty() ? n.getValue() : held.firstKey();
      offsets.put(n.getKey(), new OffsetAndMetadata(at));
    }
    commitQuietly(offsets);
  }

  private void commitQuietly(Map<TopicPartition, OffsetAndMetadata> offsets) {
    if (offsets.isEmpty()) {
      return;
    }
    try {
      consumer.commitSync(offsets);
    } catch (WakeupException w) {
      throw w;
    } catch (KafkaException e) {
      // Not committed: the records come again and the inbox recognises them.
      System.err.println("commit offsets: " + e.getMessage());
    }
  }

  /** Drops what is held for partitions this consumer no longer owns. */
  private void forget(Collection<TopicPartition> parts) {
    for (TopicPartition tp : parts) {
      next.remove(tp);
      TreeMap<Long, Parked> held = parkedAt.remove(tp);
      if (held != null) {
        for (Parked p : held.values()) {
          TreeMap<Long, Parked> w = parked.get(p.event().aggregate());
          if (w != null) {
            w.remove(p.event().version());
          }
        }
      }
    }
    parked.values().removeIf(TreeMap::isEmpty);
  }

  void wakeup() {
    consumer.wakeup();
  }

  @Override
  public void close() {
    consumer.close(Duration.ofSeconds(5));
    deadLetters.close(Duration.ofSeconds(5));
    inbox.close();
  }
}
