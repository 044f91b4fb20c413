// StreamsKv: a Kafka Streams application whose state is a RocksDB store,
// for KAFKA-4484 on the real thing (seed 001).
//
// It reads the input topic (key: string, value: bytes; a null value deletes)
// and keeps the newest value of every key in a persistent key-value store,
// one RocksDB instance per input partition, as Kafka Streams makes them.
// With each record it also stores, in the same store and so in the same
// changelog and the same transaction under exactly-once, the offset it
// applied last for that partition ("__offset:<partition>"): a reader can
// tell whether the store has caught up with what the broker acknowledged.
// Beside each value it keeps the offset of the record applied last to that
// key: a record at or before it is applied a second time (a replay after
// a kill under at-least-once), which marks the key for good, as a count or
// a sum would stay wrong for good; GET /kv says so in X-Applied-Twice.
//
// Its RocksDB settings come from the command line through a
// RocksDBConfigSetter, KAFKA-4484's knobs: --block-cache (per store),
// --write-buffer-size and --write-buffers.
//
// HTTP on --port:
//   GET /kv/KEY     the value (200), or 404; 503 while the store is not
//                   queryable (starting, rebalancing, restoring)
//   GET /position   one line "PARTITION OFFSET" per partition applied
//   GET /ready      200 once the application is RUNNING
//   GET /metrics    Prometheus text: RocksDB's block cache, memtables and
//                   table readers summed over the stores, records processed,
//                   the JVM's heap and direct memory
//
// Built by nodes/kafka-streams/build against kafka-streams from Maven
// Central (the version is pinned in nodes/kafka-streams/pom.xml).

import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import org.apache.kafka.common.Metric;
import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StoreQueryParameters;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.processor.api.Processor;
import org.apache.kafka.streams.processor.api.ProcessorContext;
import org.apache.kafka.streams.processor.api.Record;
import org.apache.kafka.streams.processor.api.RecordMetadata;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.QueryableStoreTypes;
import org.apache.kafka.streams.state.ReadOnlyKeyValueStore;
import org.apache.kafka.streams.state.RocksDBConfigSetter;
import org.apache.kafka.streams.state.Stores;
import org.rocksdb.BlockBasedTableConfig;
import org.rocksdb.Cache;
import org.rocksdb.LRUCache;
import org.rocksdb.Options;

import java.io.IOException;
import java.io.OutputStream;
import java.lang.management.BufferPoolMXBean;
import java.lang.management.ManagementFactory;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.Executors;

public class StreamsKv {
    static final String STORE = "kv";
    /**
     * A stored value: 1 byte "applied twice" (sticky), 8 bytes the offset
     * of the record applied last, then 1 byte "present" and the value
     * (none after a delete, kept only to remember the first two).
     */
    static final int HEADER = 9;
    static final java.util.concurrent.atomic.AtomicLong APPLIED_TWICE = new java.util.concurrent.atomic.AtomicLong();
    static long blockCache = 50L << 20;    // Kafka Streams' default per store
    static long writeBuffer = 16L << 20;   // Kafka Streams' default
    static int writeBuffers = 3;           // Kafka Streams' default
    static int partitions = 4;
    static KafkaStreams streams;

    /** KAFKA-4484's knobs, from the command line, for every store. */
    public static class Sized implements RocksDBConfigSetter {
        private Cache cache;

        @Override
        public void setConfig(String storeName, Options options, Map<String, Object> configs) {
            BlockBasedTableConfig table = (BlockBasedTableConfig) options.tableFormatConfig();
            cache = new LRUCache(blockCache);
            table.setBlockCache(cache);
            options.setTableFormatConfig(table);
            options.setWriteBufferSize(writeBuffer);
            options.setMaxWriteBufferNumber(writeBuffers);
        }

        @Override
        public void close(String storeName, Options options) {
            if (cache != null) {
                cache.close();
            }
        }
    }

    /** The newest value of every key, and the offset applied last per partition. */
    static final class Apply implements Processor<String, byte[], Void, Void> {
        private KeyValueStore<String, byte[]> store;
        private ProcessorContext<Void, Void> context;

        @Override
        public void init(ProcessorContext<Void, Void> context) {
            this.context = context;
            this.store = context.getStateStore(STORE);
        }

        @Override
        public void process(Record<String, byte[]> r) {
            RecordMetadata m = context.recordMetadata().orElseThrow();
            byte[] old = store.get(r.key());
            // A record at or before the one this key applied last is
            // applied a second time (a replay after a kill).
            boolean twice = old != null && (old[0] == 1 || ByteBuffer.wrap(old, 1, 8).getLong() >= m.offset());
            if (twice && (old[0] == 0)) {
                APPLIED_TWICE.incrementAndGet();
            }
            // A delete keeps the header alone: the key reads as missing,
            // and a replay of what came before it is still seen.
            byte[] v = r.value() == null ? new byte[0] : r.value();
            ByteBuffer b = ByteBuffer.allocate(HEADER + (r.value() == null ? 0 : 1 + v.length));
            b.put((byte) (twice ? 1 : 0)).putLong(m.offset());
            if (r.value() != null) {
                b.put((byte) 1).put(v);
            }
            store.put(r.key(), b.array());
            store.put("__offset:" + m.partition(), ByteBuffer.allocate(8).putLong(m.offset()).array());
        }
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = null, stateDir = null, topic = "soak-input", guarantee = "exactly_once_v2";
        String app = "soak-kv";
        int port = 0;
        for (int i = 0; i < args.length; i++) {
            switch (args[i]) {
                case "--bootstrap": bootstrap = args[++i]; break;
                case "--port": port = Integer.parseInt(args[++i]); break;
                case "--state-dir": stateDir = args[++i]; break;
                case "--topic": topic = args[++i]; break;
                case "--partitions": partitions = Integer.parseInt(args[++i]); break;
                case "--guarantee": guarantee = args[++i]; break;
                case "--application-id": app = args[++i]; break;
                case "--block-cache": blockCache = size(args[++i]); break;
                case "--write-buffer-size": writeBuffer = size(args[++i]); break;
                case "--write-buffers": writeBuffers = Integer.parseInt(args[++i]); break;
                default:
                    System.err.println("StreamsKv: unknown argument " + args[i]);
                    System.exit(2);
            }
        }
        if (bootstrap == null || stateDir == null || port == 0) {
            System.err.println("usage: StreamsKv --bootstrap HOST:PORT --port P --state-dir DIR"
                    + " [--topic T] [--partitions N] [--guarantee exactly_once_v2|at_least_once]"
                    + " [--block-cache SIZE] [--write-buffer-size SIZE] [--write-buffers N]");
            System.exit(2);
        }
        Properties p = new Properties();
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, app);
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(StreamsConfig.STATE_DIR_CONFIG, stateDir);
        p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, guarantee);
        p.put(StreamsConfig.ROCKSDB_CONFIG_SETTER_CLASS_CONFIG, Sized.class);
        p.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 1);
        p.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);
        // A restarted instance takes its tasks back at once.
        p.put("consumer.session.timeout.ms", 10000);
        p.put("internal.leave.group.on.close", true);

        Clients.createTopic(bootstrap, topic, partitions);
        StreamsBuilder b = new StreamsBuilder();
        b.addStateStore(Stores.keyValueStoreBuilder(
                Stores.persistentKeyValueStore(STORE), Serdes.String(), Serdes.ByteArray()));
        b.stream(topic, Consumed.with(Serdes.String(), Serdes.ByteArray()))
                .process(Apply::new, STORE);
        streams = new KafkaStreams(b.build(), p);
        streams.setUncaughtExceptionHandler(e -> {
            System.err.println("StreamsKv: stream thread failed: " + e);
            return StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.REPLACE_THREAD;
        });
        serve(port);
        Runtime.getRuntime().addShutdownHook(new Thread(streams::close));
        streams.start();
        System.out.println("StreamsKv on " + bootstrap + ", topic " + topic + ", " + guarantee
                + ", block cache " + (blockCache >> 20) + " MiB and write buffers " + writeBuffers
                + " x " + (writeBuffer >> 20) + " MiB per store, HTTP on 127.0.0.1:" + port);
    }


    static long size(String s) {
        String t = s.trim().toUpperCase();
        if (t.endsWith("GIB")) {
            return Long.parseLong(t.substring(0, t.length() - 3)) << 30;
        }
        if (t.endsWith("MIB")) {
            return Long.parseLong(t.substring(0, t.length() - 3)) << 20;
        }
        if (t.endsWith("KIB")) {
            return Long.parseLong(t.substring(0, t.length() - 3)) << 10;
        }
        return Long.parseLong(t);
    }

    static ReadOnlyKeyValueStore<String, byte[]> store() {
        return streams.store(StoreQueryParameters.fromNameAndType(STORE, QueryableStoreTypes.keyValueStore()));
    }

    static void serve(int port) throws IOException {
        HttpServer http = HttpServer.create(new InetSocketAddress(InetAddress.getLoopbackAddress(), port), 64);
        http.createContext("/kv/", ex -> {
            String key = ex.getRequestURI().getRawPath().substring("/kv/".length());
            key = java.net.URLDecoder.decode(key, StandardCharsets.UTF_8);
            byte[] v;
            try {
                v = store().get(key);
            } catch (RuntimeException e) {
                reply(ex, 503, ("not queryable: " + e.getMessage()).getBytes(StandardCharsets.UTF_8));
                return;
            }
            if (v == null || v.length == HEADER) {
                reply(ex, 404, new byte[0]);
            } else {
                if (v[0] == 1) {
                    ex.getResponseHeaders().add("X-Applied-Twice", "true");
                }
                reply(ex, 200, java.util.Arrays.copyOfRange(v, HEADER + 1, v.length));
            }
        });
        http.createContext("/position", ex -> {
            StringBuilder s = new StringBuilder();
            try {
                ReadOnlyKeyValueStore<String, byte[]> st = store();
                for (int i = 0; i < partitions; i++) {
                    byte[] o = st.get("__offset:" + i);
                    if (o != null) {
                        s.append(i).append(' ').append(ByteBuffer.wrap(o).getLong()).append('\n');
                    }
                }
            } catch (RuntimeException e) {
                reply(ex, 503, ("not queryable: " + e.getMessage()).getBytes(StandardCharsets.UTF_8));
                return;
            }
            reply(ex, 200, s.toString().getBytes(StandardCharsets.UTF_8));
        });
        http.createContext("/ready", ex -> {
            boolean running = streams.state() == KafkaStreams.State.RUNNING;
            reply(ex, running ? 200 : 503, streams.state().toString().getBytes(StandardCharsets.UTF_8));
        });
        http.createContext("/metrics", ex -> reply(ex, 200, metrics().getBytes(StandardCharsets.UTF_8)));
        http.setExecutor(Executors.newFixedThreadPool(8, r -> {
            Thread t = new Thread(r, "http");
            t.setDaemon(true);
            return t;
        }));
        http.start();
    }

    static void reply(HttpExchange ex, int status, byte[] body) throws IOException {
        ex.sendResponseHeaders(status, body.length == 0 ? -1 : body.length);
        if (body.length > 0) {
            try (OutputStream o = ex.getResponseBody()) {
                o.write(body);
            }
        }
        ex.close();
    }

    /** Kafka Streams' own metrics, summed over the stores, and the JVM's. */
    static String metrics() {
        double cache = 0, memtables = 0, readers = 0, processed = 0;
        for (Map.Entry<MetricName, ? extends Metric> e : streams.metrics().entrySet()) {
            String name = e.getKey().name();
            Object v = e.getValue().metricValue();
            if (!(v instanceof Number)) {
                continue;
            }
            double d = ((Number) v).doubleValue();
            switch (name) {
                case "block-cache-usage": cache += d; break;
                case "size-all-mem-tables": memtables += d; break;
                case "estimate-table-readers-mem": readers += d; break;
                case "process-total":
                    if (e.getKey().group().equals("stream-thread-metrics")) {
                        processed += d;
                    }
                    break;
                default:
            }
        }
        StringBuilder b = new StringBuilder();
        gauge(b, "rocksdb_block_cache_usage_bytes", cache);
        gauge(b, "rocksdb_memtables_size_bytes", memtables);
        gauge(b, "rocksdb_table_readers_memory_bytes", readers);
        gauge(b, "streams_records_processed_total", processed);
        gauge(b, "streams_records_applied_twice_total", APPLIED_TWICE.get());
        gauge(b, "streams_running", streams.state() == KafkaStreams.State.RUNNING ? 1 : 0);
        gauge(b, "jvm_heap_used_bytes", ManagementFactory.getMemoryMXBean().getHeapMemoryUsage().getUsed());
        gauge(b, "jvm_nonheap_used_bytes", ManagementFactory.getMemoryMXBean().getNonHeapMemoryUsage().getUsed());
        for (BufferPoolMXBean p : ManagementFactory.getPlatformMXBeans(BufferPoolMXBean.class)) {
            if (p.getName().equals("direct")) {
                gauge(b, "jvm_direct_used_bytes", p.getMemoryUsed());
            }
        }
        return b.toString();
    }

    static void gauge(StringBuilder b, String name, double v) {
        b.append("# TYPE ").append(name).append(" gauge\n").append(name).append(' ')
                .append(String.format("%.0f", v)).append('\n');
    }
}
