// A JVM key-value service on RocksDB through the real rocksdbjni, as Teku
// stores its beacon-chain data (seed 000): RocksDB's C++ memory (block
// cache, memtables, table readers, the allocator's arenas) lives outside
// the JVM's -Xmx, which is why Teku was OOM-killed under -Xmx5g until it
// ran on jemalloc. Built against rocksdbjni 7.7.3 (Teku's version before)
// and run on 7.7.3 or 9.5.2 (after: LZ4 by default) on the same data
// directory, which is the seed's upgrade. nodes/teku-jvm/build fetches both
// from Maven Central and compiles this file.
//
// It speaks enough of Redis's protocol for soak's load and read-back (SET,
// GET, MGET, DEL, EXISTS, PING, INFO) on one thread per connection, with
// Teku's RocksDB settings where the seed names them (--block-cache,
// --compression), and serves Prometheus metrics: RocksDB's own memory
// figures, the JVM's heap and the process's RSS.

import com.sun.net.httpserver.HttpServer;
import java.io.BufferedInputStream;
import java.io.BufferedOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.lang.management.ManagementFactory;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.List;
import org.rocksdb.BlockBasedTableConfig;
import org.rocksdb.BloomFilter;
import org.rocksdb.CompressionType;
import org.rocksdb.LRUCache;
import org.rocksdb.Options;
import org.rocksdb.RocksDB;
import org.rocksdb.RocksDBException;
import org.rocksdb.WriteOptions;

public class TekuKv {
    static RocksDB db;
    static WriteOptions writes;
    static LRUCache cache;

    public static void main(String[] args) throws Exception {
        int port = 6379, metricsPort = 0;
        String dataDir = null, compression = "none";
        long blockCache = 8L << 20, writeBuffer = 64L << 20;
        boolean sync = false;
        for (int i = 0; i < args.length; i++) {
            switch (args[i]) {
                case "--port": port = Integer.parseInt(args[++i]); break;
                case "--metrics-port": metricsPort = Integer.parseInt(args[++i]); break;
                case "--data-dir": dataDir = args[++i]; break;
                case "--block-cache": blockCache = size(args[++i]); break;
                case "--write-buffer-size": writeBuffer = size(args[++i]); break;
                case "--compression": compression = args[++i]; break;
                case "--sync": sync = true; break;
                default:
                    System.err.println("teku-kv: unknown argument " + args[i]
                        + "; usage: TekuKv --port P --data-dir D [--metrics-port M] [--block-cache 8MiB]"
                        + " [--write-buffer-size 64MiB] [--compression none|lz4|snappy] [--sync]");
                    System.exit(2);
            }
        }
        if (dataDir == null) {
            System.err.println("teku-kv: --data-dir is required");
            System.exit(2);
        }
        RocksDB.loadLibrary();
        Files.createDirectories(Paths.get(dataDir));
        cache = new LRUCache(blockCache);
        BlockBasedTableConfig table = new BlockBasedTableConfig()
            .setBlockCache(cache)
            .setFilterPolicy(new BloomFilter(10, false))
            .setCacheIndexAndFilterBlocks(true);
        Options options = new Options()
            .setCreateIfMissing(true)
            .setWriteBufferSize(writeBuffer)
            .setMaxBackgroundJobs(4)
            .setTableFormatConfig(table)
            .setCompressionType(compressionOf(compression));
        db = RocksDB.open(options, dataDir);
        writes = new WriteOptions().setSync(sync);
        if (metricsPort > 0) {
            HttpServer http = HttpServer.create(new InetSocketAddress("127.0.0.1", metricsPort), 16);
            http.createContext("/metrics", ex -> {
                byte[] body = metrics().getBytes(StandardCharsets.UTF_8);
                ex.getResponseHeaders().add("Content-Type", "text/plain; version=0.0.4");
                ex.sendResponseHeaders(200, body.length);
                try (OutputStream o = ex.getResponseBody()) {
                    o.write(body);
                }
            });
            http.start();
        }
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            synchronized (TekuKv.class) {
                db.close();
            }
        }));
        try (ServerSocket server = new ServerSocket()) {
            server.setReuseAddress(true);
            server.bind(new InetSocketAddress("127.0.0.1", port), 512);
            System.out.println("teku-kv: rocksdbjni " + RocksDB.rocksdbVersion() + " on " + dataDir
                + ", serving on 127.0.0.1:" + port);
            System.out.flush();
            while (true) {
                Socket s = server.accept();
                s.setTcpNoDelay(true);
                Thread t = new Thread(() -> serve(s), "conn-" + s.getPort());
                t.setDaemon(true);
                t.start();
            }
        }
    }

    static CompressionType compressionOf(String name) {
        switch (name) {
            case "none": return CompressionType.NO_COMPRESSION;
            case "lz4": return CompressionType.LZ4_COMPRESSION;
            case "snappy": return CompressionType.SNAPPY_COMPRESSION;
            default:
                System.err.println("teku-kv: --compression " + name + ": give none, lz4 or snappy");
                System.exit(2);
                return null;
        }
    }

    /** `256MiB`, `1GiB`, `64KiB` or bytes. */
    static long size(String s) {
        String t = s.trim();
        long unit = 1;
        if (t.endsWith("GiB")) {
            unit = 1L << 30;
        } else if (t.endsWith("MiB")) {
            unit = 1L << 20;
        } else if (t.endsWith("KiB")) {
            unit = 1L << 10;
        }
        if (unit > 1) {
            t = t.substring(0, t.length() - 3);
        }
        return Long.parseLong(t.trim()) * unit;
    }

    static void serve(Socket s) {
        try (s; InputStream in = new BufferedInputStream(s.getInputStream(), 64 << 10);
             OutputStream out = new BufferedOutputStream(s.getOutputStream(), 64 << 10)) {
            while (true) {
                List<byte[]> cmd = readCommand(in);
                if (cmd == null) {
                    return;
                }
                boolean quit = run(cmd, out);
                // Replies of pipelined requests go out together.
                if (in.available() == 0 || quit) {
                    out.flush();
                }
                if (quit) {
                    return;
                }
            }
        } catch (IOException e) {
            // The client went away.
        }
    }

    /** One command (an array of bulk strings, or an inline line); null at EOF. */
    static List<byte[]> readCommand(InputStream in) throws IOException {
        int first = in.read();
        if (first < 0) {
            return null;
        }
        List<byte[]> out = new ArrayList<>();
        if (first != '*') {
            String line = (char) first + readLine(in);
            for (String w : line.trim().split("\\s+")) {
                out.add(w.getBytes(StandardCharsets.UTF_8));
            }
            return out;
        }
        int n = Integer.parseInt(readLine(in));
        for (int i = 0; i < n; i++) {
            if (in.read() != '$') {
                throw new IOException("protocol error: expected a bulk string");
            }
            int len = Integer.parseInt(readLine(in));
            byte[] b = in.readNBytes(len);
            in.read();
            in.read();
            out.add(b);
        }
        return out;
    }

    static String readLine(InputStream in) throws IOException {
        StringBuilder sb = new StringBuilder();
        int c;
        while ((c = in.read()) >= 0 && c != '\r') {
            sb.append((char) c);
        }
        in.read();
        return sb.toString();
    }

    static boolean run(List<byte[]> cmd, OutputStream out) throws IOException {
        String name = new String(cmd.get(0), StandardCharsets.US_ASCII).toUpperCase();
        try {
            switch (name) {
                case "PING": simple(out, "PONG"); break;
                case "SET":
                    db.put(writes, cmd.get(1), cmd.get(2));
                    simple(out, "OK");
                    break;
                case "GET": bulk(out, db.get(cmd.get(1))); break;
                case "MGET": {
                    List<byte[]> values = db.multiGetAsList(cmd.subList(1, cmd.size()));
                    out.write(("*" + values.size() + "\r\n").getBytes(StandardCharsets.US_ASCII));
                    for (byte[] v : values) {
                        bulk(out, v);
                    }
                    break;
                }
                case "DEL":
                case "EXISTS": {
                    long n = 0;
                    for (byte[] k : cmd.subList(1, cmd.size())) {
                        if (db.get(k) != null) {
                            n++;
                            if (name.equals("DEL")) {
                                db.delete(writes, k);
                            }
                        }
                    }
                    out.write((":" + n + "\r\n").getBytes(StandardCharsets.US_ASCII));
                    break;
                }
                // Not Redis: a full compaction, answered when it is done
                // (what compaction gives back after an upgrade).
                case "COMPACT":
                    db.compactRange();
                    simple(out, "OK");
                    break;
                case "INFO":
                    bulk(out, ("# Server\r\nrocksdb_version:" + RocksDB.rocksdbVersion() + "\r\n")
                        .getBytes(StandardCharsets.UTF_8));
                    break;
                case "COMMAND":
                case "CLIENT":
                case "SELECT":
                    simple(out, "OK");
                    break;
                case "QUIT":
                    simple(out, "OK");
                    return true;
                default:
                    error(out, "ERR unknown command '" + name + "'");
            }
        } catch (RocksDBException e) {
            error(out, "ERR rocksdb: " + e.getMessage());
        } catch (IndexOutOfBoundsException e) {
            error(out, "ERR wrong number of arguments for '" + name.toLowerCase() + "' command");
        }
        return false;
    }

    static void simple(OutputStream out, String s) throws IOException {
        out.write(("+" + s + "\r\n").getBytes(StandardCharsets.US_ASCII));
    }

    static void error(OutputStream out, String s) throws IOException {
        out.write(("-" + s.replace('\r', ' ').replace('\n', ' ') + "\r\n").getBytes(StandardCharsets.UTF_8));
    }

    static void bulk(OutputStream out, byte[] v) throws IOException {
        if (v == null) {
            out.write("$-1\r\n".getBytes(StandardCharsets.US_ASCII));
            return;
        }
        out.write(("$" + v.length + "\r\n").getBytes(StandardCharsets.US_ASCII));
        out.write(v);
        out.write("\r\n".getBytes(StandardCharsets.US_ASCII));
    }

    /** RocksDB's own memory figures beside the JVM's and the process's. */
    static String metrics() {
        StringBuilder m = new StringBuilder();
        try {
            gauge(m, "rocksdb_block_cache_usage_bytes", db.getLongProperty("rocksdb.block-cache-usage"));
            gauge(m, "rocksdb_memtables_bytes", db.getLongProperty("rocksdb.cur-size-all-mem-tables"));
            gauge(m, "rocksdb_table_readers_bytes", db.getLongProperty("rocksdb.estimate-table-readers-mem"));
            gauge(m, "rocksdb_live_sst_files_bytes", db.getLongProperty("rocksdb.live-sst-files-size"));
        } catch (RocksDBException e) {
            // A property this version does not know: left out.
        }
        gauge(m, "jvm_heap_used_bytes", ManagementFactory.getMemoryMXBean().getHeapMemoryUsage().getUsed());
        gauge(m, "jvm_heap_max_bytes", Runtime.getRuntime().maxMemory());
        try {
            for (String line : Files.readAllLines(Paths.get("/proc/self/status"))) {
                if (line.startsWith("VmRSS:")) {
                    long kb = Long.parseLong(line.replaceAll("[^0-9]", ""));
                    gauge(m, "process_resident_memory_bytes", kb * 1024);
                }
            }
        } catch (IOException | NumberFormatException e) {
            // Not Linux: no RSS.
        }
        return m.toString();
    }

    static void gauge(StringBuilder m, String name, long v) {
        m.append("# TYPE ").append(name).append(" gauge\n").append(name).append(' ').append(v).append('\n');
    }
}
