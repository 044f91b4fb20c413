// KafkaAdapter: soak's client adapter (docs/src/protocols.md, JSON lines on
// stdin and stdout) for a Kafka Streams application: writes go to its input
// topic through the broker, reads come from its interactive-query endpoint.
//
// init params: bootstrap (the broker, HOST:PORT), topic (soak-input),
// partitions (4, as the application's topic has), read_timeout_s (60).
// target: the application's HTTP address (StreamsKv's --port).
//
// A write is a record with acks=all from an idempotent producer, answered
// ok, fail or info as Clients.send says; a delete is a record with a null
// value (a tombstone), alike.
//
// A read waits until the application has caught up: the broker's end
// offset of the key's partition is asked when the read arrives, and the
// read is answered only once the application's store has applied that
// partition up to it (GET /position); then GET /kv/KEY. A read that does
// not catch up within read_timeout_s, or finds the store not queryable
// (restoring after a kill), is info: it judges nothing. So a read never
// sees the store behind a write acknowledged before it was sent. A key the
// application applied a record of twice (X-Applied-Twice: a replay under
// at-least-once) reads as "applied-twice:" and its value, a value no write
// made: soak counts it corrupted, and adapter.log names the key.
//
// Built by nodes/kafka-streams/build against kafka-clients from Maven
// Central.

import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.common.TopicPartition;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.net.URI;
import java.net.URLEncoder;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Base64;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;

public class KafkaAdapter {
    static KafkaProducer<String, byte[]> producer;
    static KafkaConsumer<byte[], byte[]> offsets;
    static HttpClient http = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(2)).build();
    static String app, topic = "soak-input";
    static int partitions = 4;
    static long readTimeoutMs = 60_000;

    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        ExecutorService readers = Executors.newFixedThreadPool(8);
        String line;
        while ((line = in.readLine()) != null) {
            Map<String, Object> m = Json.object(line);
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
                    readers.submit(() -> read(id, key));
                    break;
                }
                case "node": break; // the application went down or came back: reads wait for it
                default: emit("{\"type\":\"fail\",\"in_reply_to\":" + id + ",\"error\":\"unknown type " + Json.quote(type) + "\"}");
            }
        }
        producer.close(Duration.ofSeconds(5));
        System.exit(0);
    }

    @SuppressWarnings("unchecked")
    static void init(Map<String, Object> m, long id) {
        app = "http://" + m.get("target");
        Map<String, Object> params = (Map<String, Object>) m.getOrDefault("params", new HashMap<>());
        String bootstrap = (String) params.get("bootstrap");
        topic = (String) params.getOrDefault("topic", topic);
        partitions = Integer.parseInt(String.valueOf(params.getOrDefault("partitions", "4")));
        readTimeoutMs = 1000L * Long.parseLong(String.valueOf(params.getOrDefault("read_timeout_s", "60")));
        producer = Clients.producer(bootstrap, true);
        offsets = Clients.offsets(bootstrap);
        emit("{\"type\":\"init_ok\",\"in_reply_to\":" + id
                + ",\"capabilities\":{\"multi_read\":false,\"delete\":true},\"concurrency\":32}");
    }

    static void send(long id, String key, byte[] value) {
        Clients.send(producer, topic, id, key, value);
    }

    static void read(long id, String key) {
        try {
            int part = Clients.partition(key, partitions);
            long end = endOffset(part, System.nanoTime());
            long deadline = System.currentTimeMillis() + readTimeoutMs;
            String why = "";
            while (System.currentTimeMillis() < deadline) {
                long applied = position(part);
                if (applied >= end - 1) {
                    HttpResponse<byte[]> r = get("/kv/" + URLEncoder.encode(key, StandardCharsets.UTF_8));
                    if (r.statusCode() == 200) {
                        byte[] value = r.body();
                        if (r.headers().firstValue("X-Applied-Twice").isPresent()) {
                            // The store applied a record of this key twice:
                            // its value is not what the writes made it.
                            System.err.println("KafkaAdapter: " + key + " was applied twice by the application");
                            value = ("applied-twice:" + new String(value, StandardCharsets.ISO_8859_1))
                                    .getBytes(StandardCharsets.ISO_8859_1);
                        }
                        emit("{\"type\":\"ok\",\"in_reply_to\":" + id + ",\"values\":[\""
                                + Base64.getEncoder().encodeToString(value) + "\"]}");
                        return;
                    }
                    if (r.statusCode() == 404) {
                        emit("{\"type\":\"ok\",\"in_reply_to\":" + id + ",\"values\":[null]}");
                        return;
                    }
                    why = "HTTP " + r.statusCode() + ": " + new String(r.body(), StandardCharsets.UTF_8);
                } else {
                    why = "partition " + part + " applied up to " + applied + " of " + (end - 1);
                }
                Thread.sleep(20);
            }
            emit("{\"type\":\"info\",\"in_reply_to\":" + id + ",\"error\":" + Json.quote("not caught up within "
                    + readTimeoutMs / 1000 + " s: " + why) + "}");
        } catch (Exception e) {
            emit("{\"type\":\"info\",\"in_reply_to\":" + id + ",\"error\":" + Json.quote(e.toString()) + "}");
        }
    }

    static long endsAsked = Long.MIN_VALUE;
    static long[] ends;

    /**
     * The broker's end offset of a partition, as asked after `arrived`
     * (System.nanoTime()): reads that arrived while one question was on
     * its way share the next one's answer.
     */
    static long endOffset(int part, long arrived) {
        synchronized (offsets) {
            if (endsAsked < arrived) {
                endsAsked = System.nanoTime();
                List<TopicPartition> all = new ArrayList<>();
                for (int i = 0; i < partitions; i++) {
                    all.add(new TopicPartition(topic, i));
                }
                Map<TopicPartition, Long> got = offsets.endOffsets(all, Duration.ofSeconds(5));
                ends = new long[partitions];
                for (int i = 0; i < partitions; i++) {
                    ends[i] = got.get(all.get(i));
                }
            }
            return ends[part];
        }
    }

    /** The offset the application applied last on a partition, -1 for none (or not answering). */
    static long position(int part) {
        try {
            HttpResponse<byte[]> r = get("/position");
            if (r.statusCode() != 200) {
                return -1;
            }
            for (String l : new String(r.body(), StandardCharsets.UTF_8).split("\n")) {
                String[] f = l.trim().split(" ");
                if (f.length == 2 && Integer.parseInt(f[0]) == part) {
                    return Long.parseLong(f[1]);
                }
            }
        } catch (Exception e) {
            // down or restarting: not caught up
        }
        return -1;
    }

    static HttpResponse<byte[]> get(String path) throws Exception {
        HttpRequest req = HttpRequest.newBuilder(URI.create(app + path)).timeout(Duration.ofSeconds(5)).build();
        return http.send(req, HttpResponse.BodyHandlers.ofByteArray());
    }

    static synchronized void emit(String line) {
        System.out.println(line);
        System.out.flush();
    }

    /** Just enough JSON for soak's requests: objects, arrays, strings, numbers, true, false, null. */
    static final class Json {
        private final String s;
        private int i;

        private Json(String s) {
            this.s = s;
        }

        @SuppressWarnings("unchecked")
        static Map<String, Object> object(String line) {
            Object v = new Json(line).value();
            if (!(v instanceof Map)) {
                throw new IllegalArgumentException("not a JSON object: " + line);
            }
            return (Map<String, Object>) v;
        }

        static String quote(String s) {
            StringBuilder b = new StringBuilder("\"");
            for (char c : s.toCharArray()) {
                if (c == '"' || c == '\\') {
                    b.append('\\').append(c);
                } else if (c < 0x20) {
                    b.append(String.format("\\u%04x", (int) c));
                } else {
                    b.append(c);
                }
            }
            return b.append('"').toString();
        }

        private void ws() {
            while (i < s.length() && Character.isWhitespace(s.charAt(i))) {
                i++;
            }
        }

        private Object value() {
            ws();
            char c = s.charAt(i);
            if (c == '{') {
                Map<String, Object> m = new LinkedHashMap<>();
                i++;
                ws();
                if (s.charAt(i) == '}') {
                    i++;
                    return m;
                }
                while (true) {
                    ws();
                    String k = string();
                    ws();
                    i++; // ':'
                    m.put(k, value());
                    ws();
                    if (s.charAt(i++) == '}') {
                        return m;
                    }
                }
            }
            if (c == '[') {
                List<Object> l = new ArrayList<>();
                i++;
                ws();
                if (s.charAt(i) == ']') {
                    i++;
                    return l;
                }
                while (true) {
                    l.add(value());
                    ws();
                    if (s.charAt(i++) == ']') {
                        return l;
                    }
                }
            }
            if (c == '"') {
                return string();
            }
            int start = i;
            while (i < s.length() && ",}] \t".indexOf(s.charAt(i)) < 0) {
                i++;
            }
            String w = s.substring(start, i);
            switch (w) {
                case "true": return Boolean.TRUE;
                case "false": return Boolean.FALSE;
                case "null": return null;
                default: return Double.parseDouble(w);
            }
        }

        private String string() {
            StringBuilder b = new StringBuilder();
            i++; // '"'
            while (true) {
                char c = s.charAt(i++);
                if (c == '"') {
                    return b.toString();
                }
                if (c == '\\') {
                    char e = s.charAt(i++);
                    switch (e) {
                        case 'n': b.append('\n'); break;
                        case 't': b.append('\t'); break;
                        case 'r': b.append('\r'); break;
                        case 'b': b.append('\b'); break;
                        case 'f': b.append('\f'); break;
                        case 'u': b.append((char) Integer.parseInt(s.substring(i, i + 4), 16)); i += 4; break;
                        default: b.append(e);
                    }
                } else {
                    b.append(c);
                }
            }
        }
    }
}
