// KafkaLogAdapter: soak's client adapter (docs/src/protocols.md, JSON lines
// on stdin and stdout) for a Kafka broker itself as the node: a key's value
// is the newest record of that key in a topic (a compacted topic's view).
//
// init params: topic (soak-log), partitions (4), read_timeout_s (10).
// target: the broker, HOST:PORT.
//
// A write is a record produced with acks=all (not idempotent: one request
// in flight per connection, so a retry cannot reorder a key's records),
// answered ok, fail or info as Clients.send says; a delete is a record
// with a null value (a tombstone), alike.
//
// A read: a consumer of the adapter's own follows every partition from
// its beginning into a map of each key's newest value. A read asks the
// broker's end offset of the key's partition when it arrives, and is
// answered from the map once the consumer has read that partition up to
// it: so it sees every write acknowledged before it was sent. A read that
// cannot catch up within read_timeout_s (the broker down) is info.
//
// When soak says the broker came back ({"type":"node","up":true}), the
// map is dropped and read again from the beginning: a power cut may have
// taken records the map still holds, and what the broker has now is what
// a read must see.
//
// Built by nodes/kafka-streams/build against kafka-clients from Maven
// Central; it uses KafkaAdapter's JSON reader and output and Clients.

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.StringDeserializer;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Base64;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;

public class KafkaLogAdapter {
    static KafkaProducer<String, byte[]> producer;
    static KafkaConsumer<byte[], byte[]> offsets;
    static String bootstrap, topic = "soak-log";
    static int partitions = 4;
    static long readTimeoutMs = 10_000;

    // The map, what the follower has read of each partition, and the
    // generation it read them in: all under `lock`.
    static final Object lock = new Object();
    static final Map<String, byte[]> newest = new HashMap<>();
    static long[] read;
    static long wanted = 0, built = -1;

    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        ExecutorService readers = Executors.newFixedThreadPool(8);
        String line;
        while ((line = in.readLine()) != null) {
            Map<String, Object> m = KafkaAdapter.Json.object(line);
            String type = (String) m.get("type");
            long id = m.get("id") == null ? -1 : ((Number) m.get("id")).longValue();
            switch (type) {
                case "init": init(m, id); break;
                case "write":
                    send(id, (String) m.get("key"), Base64.getDecoder().decode((String) m.get("value")));
                    break;
                case "delete": send(id, (String) m.get("key"), null); break;
                case "read": {
                    String key = (String) ((List<?>) m.get("keys")).get(0);
                    long generation;
                    synchronized (lock) {
                        generation = wanted;
                    }
                    readers.submit(() -> read(id, key, generation));
                    break;
                }
                case "node":
                    if (Boolean.TRUE.equals(m.get("up"))) {
                        synchronized (lock) {
                            wanted++;
                        }
                        System.err.println("KafkaLogAdapter: the broker came back: reading the topic again");
                    }
                    break;
                default:
                    KafkaAdapter.emit("{\"type\":\"fail\",\"in_reply_to\":" + id + ",\"error\":\"unknown type "
                            + KafkaAdapter.Json.quote(type) + "\"}");
            }
        }
        producer.close(Duration.ofSeconds(5));
        System.exit(0);
    }

    @SuppressWarnings("unchecked")
    static void init(Map<String, Object> m, long id) throws Exception {
        bootstrap = (String) m.get("target");
        Map<String, Object> params = (Map<String, Object>) m.getOrDefault("params", new HashMap<>());
        topic = (String) params.getOrDefault("topic", topic);
        partitions = Integer.parseInt(String.valueOf(params.getOrDefault("partitions", "4")));
        readTimeoutMs = 1000L * Long.parseLong(String.valueOf(params.getOrDefault("read_timeout_s", "10")));
        read = new long[partitions];
        Clients.createTopic(bootstrap, topic, partitions);
        producer = Clients.producer(bootstrap, false);
        offsets = Clients.offsets(bootstrap);
        Thread follower = new Thread(KafkaLogAdapter::follow, "follower");
        follower.setDaemon(true);
        follower.start();
        KafkaAdapter.emit("{\"type\":\"init_ok\",\"in_reply_to\":" + id
                + ",\"capabilities\":{\"multi_read\":false,\"delete\":true},\"concurrency\":32}");
    }

    static void send(long id, String key, byte[] value) {
        Clients.send(producer, topic, id, key, value);
    }

    /** Follows every partition into `newest`, from the beginning again whenever asked. */
    static void follow() {
        Properties c = new Properties();
        c.put("bootstrap.servers", bootstrap);
        c.put("enable.auto.commit", "false");
        c.put("auto.offset.reset", "earliest");
        c.put("request.timeout.ms", "5000");
        List<TopicPartition> all = new ArrayList<>();
        for (int i = 0; i < partitions; i++) {
            all.add(new TopicPartition(topic, i));
        }
        try (KafkaConsumer<String, byte[]> consumer =
                     new KafkaConsumer<>(c, new StringDeserializer(), new ByteArrayDeserializer())) {
            consumer.assign(all);
            long generation = -1;
            while (true) {
                try {
                    long want;
                    synchronized (lock) {
                        want = wanted;
                    }
                    if (want != generation) {
                        consumer.seekToBeginning(all);
                        synchronized (lock) {
                            newest.clear();
                            java.util.Arrays.fill(read, 0);
                        }
                        generation = want;
                    }
                    var records = consumer.poll(Duration.ofMillis(100));
                    long[] at = new long[partitions];
                    for (int i = 0; i < partitions; i++) {
                        at[i] = consumer.position(all.get(i), Duration.ofSeconds(5));
                    }
                    synchronized (lock) {
                        for (ConsumerRecord<String, byte[]> r : records) {
                            if (r.value() == null) {
                                newest.remove(r.key());
                            } else {
                                newest.put(r.key(), r.value());
                            }
                        }
                        if (wanted == generation) {
                            read = at;
                            built = generation;
                        }
                        lock.notifyAll();
                    }
                } catch (Exception e) {
                    // The broker down, or its log cut shorter than what was
                    // read (a power cut): from the beginning once it answers.
                    System.err.println("KafkaLogAdapter: following " + topic + ": " + e);
                    synchronized (lock) {
                        wanted++;
                    }
                    sleep(200);
                }
            }
        }
    }

    static void read(long id, String key, long generation) {
        try {
            int part = Clients.partition(key, partitions);
            long end;
            synchronized (offsets) {
                end = offsets.endOffsets(List.of(new TopicPartition(topic, part)), Duration.ofSeconds(5))
                        .get(new TopicPartition(topic, part));
            }
            long deadline = System.currentTimeMillis() + readTimeoutMs;
            synchronized (lock) {
                while (built < generation || read[part] < end) {
                    long left = deadline - System.currentTimeMillis();
                    if (left <= 0) {
                        KafkaAdapter.emit("{\"type\":\"info\",\"in_reply_to\":" + id + ",\"error\":"
                                + KafkaAdapter.Json.quote("not caught up within " + readTimeoutMs / 1000
                                + " s: partition " + part + " read up to " + read[part] + " of " + end) + "}");
                        return;
                    }
                    lock.wait(left);
                }
                byte[] value = newest.get(key);
                KafkaAdapter.emit("{\"type\":\"ok\",\"in_reply_to\":" + id + ",\"values\":["
                        + (value == null ? "null" : "\"" + Base64.getEncoder().encodeToString(value) + "\"") + "]}");
            }
        } catch (Exception e) {
            KafkaAdapter.emit("{\"type\":\"info\",\"in_reply_to\":" + id + ",\"error\":"
                    + KafkaAdapter.Json.quote(e.toString()) + "}");
        }
    }

    static void sleep(long ms) {
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
