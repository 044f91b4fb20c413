// Clients: the Kafka clients that KafkaAdapter, KafkaLogAdapter and
// StreamsKv share, made in one place so that their settings cannot drift
// apart: the producer every write goes through, the consumer that asks
// end offsets, the topic made if the broker lacks it, a key's partition,
// and how a producer's answer becomes soak's ok, fail or info.
//
// Built by nodes/kafka-streams/build with the other three.

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.Callback;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.errors.AuthorizationException;
import org.apache.kafka.common.errors.InvalidTopicException;
import org.apache.kafka.common.errors.RecordTooLargeException;
import org.apache.kafka.common.errors.TopicExistsException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.apache.kafka.common.utils.Utils;

import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.ExecutionException;

final class Clients {
    private Clients() {}

    /**
     * A producer with acks=all that gives up within soak's timeouts.
     * Idempotent, the broker drops a retry's duplicate; not idempotent,
     * one request in flight per connection, so a retry cannot reorder a
     * key's records either.
     */
    static KafkaProducer<String, byte[]> producer(String bootstrap, boolean idempotent) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("acks", "all");
        p.put("enable.idempotence", String.valueOf(idempotent));
        if (!idempotent) {
            p.put("max.in.flight.requests.per.connection", "1");
        }
        p.put("linger.ms", "1");
        p.put("max.block.ms", "5000");
        p.put("request.timeout.ms", "5000");
        p.put("delivery.timeout.ms", "15000");
        return new KafkaProducer<>(p, new StringSerializer(), new ByteArraySerializer());
    }

    /** A consumer that only asks the broker for end offsets. */
    static KafkaConsumer<byte[], byte[]> offsets(String bootstrap) {
        Properties c = new Properties();
        c.put("bootstrap.servers", bootstrap);
        c.put("request.timeout.ms", "5000");
        return new KafkaConsumer<>(c, new ByteArrayDeserializer(), new ByteArrayDeserializer());
    }

    /** The topic, made with `partitions` (replication 1) if the broker lacks it. */
    static void createTopic(String bootstrap, String topic, int partitions) throws Exception {
        Properties a = new Properties();
        a.put("bootstrap.servers", bootstrap);
        try (Admin admin = Admin.create(a)) {
            admin.createTopics(List.of(new NewTopic(topic, partitions, (short) 1))).all().get();
        } catch (ExecutionException e) {
            if (!(e.getCause() instanceof TopicExistsException)) {
                throw e;
            }
        }
    }

    /** The partition the default partitioner gives a key. */
    static int partition(String key, int partitions) {
        return Utils.toPositive(Utils.murmur2(key.getBytes(StandardCharsets.UTF_8))) % partitions;
    }

    /**
     * Sends a record (a null value is a tombstone) and answers request `id`:
     *   acknowledged                                        -> ok
     *   refused for what it is (too large, an invalid topic, not authorised)
     *   or never sent (no metadata within max.block.ms)     -> fail (not done)
     *   anything else (a timeout, a lost connection)        -> info (unknown)
     */
    static void send(KafkaProducer<String, byte[]> producer, String topic, long id, String key, byte[] value) {
        Callback done = (meta, e) -> {
            if (e == null) {
                KafkaAdapter.emit("{\"type\":\"ok\",\"in_reply_to\":" + id + "}");
            } else {
                boolean refused = e instanceof RecordTooLargeException || e instanceof InvalidTopicException
                        || e instanceof AuthorizationException;
                KafkaAdapter.emit("{\"type\":\"" + (refused ? "fail" : "info") + "\",\"in_reply_to\":" + id
                        + ",\"error\":" + KafkaAdapter.Json.quote(e.toString()) + "}");
            }
        };
        try {
            producer.send(new ProducerRecord<>(topic, key, value), done);
        } catch (RuntimeException e) {
            // Thrown before the record left: no metadata, a full buffer.
            KafkaAdapter.emit("{\"type\":\"fail\",\"in_reply_to\":" + id + ",\"error\":"
                    + KafkaAdapter.Json.quote(e.toString()) + "}");
        }
    }
}
