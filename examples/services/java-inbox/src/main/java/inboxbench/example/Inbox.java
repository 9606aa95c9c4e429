package inboxbench.example;

import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;

/**
 * The article's inbox transaction on one JDBC connection with autocommit
 * off: the inbox row, then the version-guarded update, decided by the
 * affected-row counts, committed together. One Inbox per consumer thread.
 */
final class Inbox implements AutoCloseable {

  enum Outcome {
    /** The event changed the account; committed. */
    APPLIED,
    /** Its inbox row was there: done before; nothing changed. */
    DUPLICATE,
    /** Its predecessor has not taken effect yet: rolled back, try later. */
    GAP,
    /** A version the account already passed, under a new id: rolled back, never applied. */
    STALE
  }

  private final Config cfg;
  private Connection conn;
  /** The split mistake writes the inbox row on a second connection, in autocommit. */
  private Connection splitConn;

  Inbox(Config cfg) throws SQLException {
    this.cfg = cfg;
    connect();
  }

  private void connect() throws SQLException {
    conn = DriverManager.getConnection(cfg.jdbcUrl(), cfg.pgUser(), cfg.pgPassword());
    conn.setAutoCommit(false);
    if (cfg.mistake() == Config.Mistake.SPLIT) {
      splitConn = DriverManager.getConnection(cfg.jdbcUrl(), cfg.pgUser(), cfg.pgPassword());
      splitConn.setAutoCommit(true);
    }
  }

  /**
   * Applies e once. A database error rolls back (a rollback failure is
   * attached to it, never replaces it) and is thrown: the caller retries
   * the same event on a fresh connection and acknowledges nothing.
   */
  Outcome apply(Event e) throws SQLException {
    try {
      return applyInTx(e);
    } catch (SQLException err) {
      try {
        conn.rollback();
      } catch (SQLException rb) {
        err.addSuppressed(rb);
      }
      throw err;
    }
  }

  private Outcome applyInTx(Event e) throws SQLException {
    Connection inboxConn = cfg.mistake() == Config.Mistake.SPLIT ? splitConn : conn;
    int claimed = update(inboxConn, "INSERT INTO inbox (consumer, source, event_id) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
        cfg.consumer(), e.source(), e.id());
    if (claimed == 0) {
      conn.rollback();
      return Outcome.DUPLICATE;
    }
    update(conn, "INSERT INTO account (id, balance, version) VALUES (?, 0, 0) ON CONFLICT DO NOTHING", e.aggregate());
    int changed = e.snapshot()
        ? update(conn, "UPDATE account SET balance = ?, version = ? WHERE id = ? AND version < ?", e.amount(), e.version(), e.aggregate(), e.version())
        : update(conn, "UPDATE account SET balance = balance + ?, version = ? WHERE id = ? AND version = ?", e.amount(), e.version(), e.aggregate(), e.version() - 1);
    if (changed == 1) {
      conn.commit();
      return Outcome.APPLIED;
    }
    // No row changed: the inbox row rolls back with it, so the event can
    // be processed once its predecessor is in. Tell ahead from behind.
    conn.rollback();
    long current = currentVersion(e.aggregate());
    return current >= e.version() ? Outcome.STALE : Outcome.GAP;
  }

  private long currentVersion(String aggregate) throws SQLException {
    try (PreparedStatement st = conn.prepareStatement("SELECT version FROM account WHERE id = ?")) {
      st.setString(1, aggregate);
      try (ResultSet rs = st.executeQuery()) {
        long v = rs.next() ? rs.getLong(1) : 0;
        conn.rollback();
        return v;
      }
    }
  }

  private static int update(Connection c, String sql, Object... args) throws SQLException {
    try (PreparedStatement st = c.prepareStatement(sql)) {
      for (int i = 0; i < args.length; i++) {
        st.setObject(i + 1, args[i]);
      }
      return st.executeUpdate();
    }
  }

  /** Replaces a connection that failed (terminated by the server, cut). */
  void reconnect() {
    close();
    for (long wait = 100; ; wait = Math.min(wait * 2, 2000)) {
      try {
        connect();
        return;
      } catch (SQLException e) {
        System.err.println("reconnect to PostgreSQL: " + e.getMessage());
        sleep(wait);
      }
    }
  }

  /**
   * Applies e, retrying a database failure on a fresh connection until it
   * goes through: an event is never given up while the database is away.
   */
  Outcome applyRetrying(Event e) throws InterruptedException {
    for (long wait = 50; ; wait = Math.min(wait * 2, 2000)) {
      try {
        return apply(e);
      } catch (SQLException err) {
        System.err.println("apply " + e.id() + ": " + err.getMessage() + " (retrying)");
        if (Thread.currentThread().isInterrupted()) {
          throw new InterruptedException();
        }
        reconnect();
        sleep(wait);
      }
    }
  }

  /**
   * Applies e once, the way code that settled the message first does: a
   * database failure is logged and the event dropped, since the broker
   * has already forgotten it (the ack-before-commit mistake).
   */
  Outcome applyOnce(Event e) {
    try {
      return apply(e);
    } catch (SQLException err) {
      System.err.println("apply " + e.id() + ": " + err.getMessage() + " (already acknowledged: dropped)");
      reconnect();
      return null;
    }
  }

  static void sleep(long ms) {
    try {
      Thread.sleep(ms);
    } catch (InterruptedException ie) {
      Thread.currentThread().interrupt();
    }
  }

  @Override
  public void close() {
    for (Connection c : new Connection[] {conn, splitConn}) {
      if (c != null) {
        try {
          c.close();
        } catch (SQLException ignored) {
          // closing a connection that already failed
        }
      }
    }
  }
}
