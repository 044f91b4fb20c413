// A JVM reference node for soak: a RESP2 server (PING, ECHO, SET, GET, DEL,
// EXISTS, MGET, DBSIZE, INFO) with the native memory that bites JVM services
// in production, outside the heap that -Xmx caps:
//
//   * event loops, each with its own pool of direct-buffer chunks (4 MiB, as
//     netty's pooled allocator gives each event loop an arena); a reply is a
//     slice of a chunk, and each connection keeps its last --retain replies
//     (a read-ahead), so one live slice pins its whole chunk and a pool
//     cannot use another's free space (HDDS-16728: 98.5% of 30 GiB free);
//   * --deflate: every SET compresses its value with a fresh
//     java.util.zip.Deflater on the event loop's thread (zlib's state comes
//     from malloc, in that thread's glibc arena).
//
// Writes go to an append-only file in --data-dir before they are
// acknowledged (--sync: fsynced too), and are replayed at start.
// Prometheus text on --metrics-port: heap, non-heap, direct memory, and the
// pools' chunk bytes against the bytes their live slices hold
// (allocator_resident_bytes / allocator_allocated_bytes, which soak reports
// as resident / allocated).
//
// Built by nodes/jvm/build (javac, into target/jvm-node); run with
// java -Xmx64m -cp target/jvm-node SoakJvmNode --port P --data-dir D

import com.sun.net.httpserver.HttpServer;
import java.io.*;
import java.lang.management.*;
import java.net.*;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.*;
import java.util.*;
import java.util.concurrent.*;
import java.util.concurrent.atomic.*;
import java.util.zip.Deflater;

public class SoakJvmNode {
    static final ConcurrentHashMap<String, byte[]> DATA = new ConcurrentHashMap<>();
    static int chunkSize = 4 << 20;
    static int retain = 64;
    static boolean deflate = false;
    static boolean sync = false;
    static DataOutputStream aof;
    static FileOutputStream aofFile;
    static final Object AOF_LOCK = new Object();
    static final List<Pool> POOLS = new CopyOnWriteArrayList<>();

    /** An event loop's arena: chunks of direct memory, handed out as slices. */
    static final class Pool {
        final List<Chunk> chunks = new ArrayList<>();
        Chunk current;
        final AtomicLong chunkBytes = new AtomicLong();
        final AtomicLong usedBytes = new AtomicLong();

        synchronized Slice slice(int n) {
            if (n > chunkSize) {
                Chunk big = new Chunk(ByteBuffer.allocateDirect(n));
                chunks.add(big);
                chunkBytes.addAndGet(n);
                return big.take(n, this);
            }
            if (current == null || current.buf.remaining() < n) {
                current = null;
                for (Chunk c : chunks) {
                    // A chunk is reused only once every slice of it is released.
                    if (c.live == 0 && c.buf.capacity() == chunkSize) {
                        c.buf.clear();
                        current = c;
                        break;
                    }
                }
                if (current == null) {
                    current = new Chunk(ByteBuffer.allocateDirect(chunkSize));
                    chunks.add(current);
                    chunkBytes.addAndGet(chunkSize);
                }
            }
            return current.take(n, this);
        }

        synchronized void release(Slice s) {
            s.chunk.live--;
            usedBytes.addAndGet(-s.buf.limit());
        }
    }

    static final class Chunk {
        final ByteBuffer buf;
        int live;

        Chunk(ByteBuffer buf) {
            this.buf = buf;
        }

        Slice take(int n, Pool pool) {
            ByteBuffer s = buf.slice();
            s.limit(n);
            buf.position(buf.position() + n);
            live++;
            pool.usedBytes.addAndGet(n);
            return new Slice(this, s);
        }
    }

    static final class Slice {
        final Chunk chunk;
        final ByteBuffer buf;

        Slice(Chunk chunk, ByteBuffer buf) {
            this.chunk = chunk;
            this.buf = buf;
        }
    }

    public static void main(String[] args) throws Exception {
        int port = 0, metricsPort = 0, loops = 2;
        String dataDir = null;
        for (int i = 0; i < args.length; i++) {
            switch (args[i]) {
                case "--port": port = Integer.parseInt(args[++i]); break;
                case "--metrics-port": metricsPort = Integer.parseInt(args[++i]); break;
                case "--data-dir": dataDir = args[++i]; break;
                case "--event-loops": loops = Integer.parseInt(args[++i]); break;
                case "--chunk-size": chunkSize = parseSize(args[++i]); break;
                case "--retain": retain = Integer.parseInt(args[++i]); break;
                case "--deflate": deflate = true; break;
                case "--sync": sync = true; break;
                default:
                    System.err.println("soak-jvm-node: unknown argument " + args[i]);
                    System.exit(2);
            }
        }
        if (port == 0 || dataDir == null) {
            System.err.println("usage: SoakJvmNode --port P --data-dir D [--metrics-port M] [--event-loops N] [--chunk-size 4MiB] [--retain N] [--deflate] [--sync]");
            System.exit(2);
        }
        Path dir = Paths.get(dataDir);
        Files.createDirectories(dir);
        Path log = dir.resolve("appendonly.log");
        replay(log);
        aofFile = new FileOutputStream(log.toFile(), true);
        aof = new DataOutputStream(new BufferedOutputStream(aofFile, 1 << 16));
        if (metricsPort != 0) {
            serveMetrics(metricsPort);
        }
        ExecutorService[] eventLoops = new ExecutorService[loops];
        for (int i = 0; i < loops; i++) {
            Pool pool = new Pool();
            POOLS.add(pool);
            final int n = i;
            eventLoops[i] = Executors.newCachedThreadPool(r -> {
                Thread t = new Thread(r, "event-loop-" + n);
                t.setDaemon(true);
                return t;
            });
        }
        ServerSocket server = new ServerSocket();
        server.setReuseAddress(true);
        server.bind(new InetSocketAddress(InetAddress.getLoopbackAddress(), port));
        System.out.println("soak-jvm-node ready: resp=127.0.0.1:" + port + " event-loops=" + loops
                + " keys=" + DATA.size());
        System.out.flush();
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            synchronized (AOF_LOCK) {
                try {
                    aof.flush();
                    aofFile.getFD().sync();
                } catch (IOException ignored) {
                }
            }
        }));
        int next = 0;
        while (true) {
            Socket s = server.accept();
            s.setTcpNoDelay(true);
            int loop = next++ % loops;
            Pool pool = POOLS.get(loop);
            eventLoops[loop].submit(() -> serve(s, pool));
        }
    }

    static int parseSize(String s) {
        String t = s.trim();
        long mult = 1;
        if (t.endsWith("MiB")) { mult = 1 << 20; t = t.substring(0, t.length() - 3); }
        else if (t.endsWith("KiB")) { mult = 1 << 10; t = t.substring(0, t.length() - 3); }
        return (int) (Long.parseLong(t) * mult);
    }

    /**
     * Replays the append-only file, and cuts it after its last whole record:
     * a write the kernel's OOM killer interrupted leaves a torn one, never
     * acknowledged, which must not hide the records appended after it.
     */
    static void replay(Path log) throws IOException {
        if (!Files.exists(log)) {
            return;
        }
        long whole = 0;
        try (DataInputStream in = new DataInputStream(new BufferedInputStream(Files.newInputStream(log), 1 << 16))) {
            while (true) {
                try {
                    int op = in.readByte();
                    int kl = in.readInt();
                    if ((op != 'S' && op != 'D') || kl < 0 || kl > (64 << 20)) {
                        break;
                    }
                    byte[] k = new byte[kl];
                    in.readFully(k);
                    String key = new String(k, StandardCharsets.ISO_8859_1);
                    long size = 1 + 4 + kl;
                    if (op == 'S') {
                        int vl = in.readInt();
                        if (vl < 0 || vl > (512 << 20)) {
                            break;
                        }
                        byte[] v = new byte[vl];
                        in.readFully(v);
                        DATA.put(key, v);
                        size += 4 + vl;
                    } else {
                        DATA.remove(key);
                    }
                    whole += size;
                } catch (EOFException e) {
                    break;
                }
            }
        }
        try (java.nio.channels.FileChannel ch = java.nio.channels.FileChannel.open(log, StandardOpenOption.WRITE)) {
            if (ch.size() > whole) {
                System.err.println("soak-jvm-node: cut a torn record at byte " + whole + " of " + ch.size());
                ch.truncate(whole);
            }
        }
    }

    static void append(char op, String key, byte[] value) throws IOException {
        synchronized (AOF_LOCK) {
            byte[] k = key.getBytes(StandardCharsets.ISO_8859_1);
            aof.writeByte(op);
            aof.writeInt(k.length);
            aof.write(k);
            if (value != null) {
                aof.writeInt(value.length);
                aof.write(value);
            }
            aof.flush();
            if (sync) {
                aofFile.getFD().sync();
            }
        }
    }

    static void serve(Socket s, Pool pool) {
        ArrayDeque<Slice> kept = new ArrayDeque<>();
        try (s) {
            InputStream in = new BufferedInputStream(s.getInputStream(), 1 << 16);
            OutputStream out = new BufferedOutputStream(s.getOutputStream(), 1 << 16);
            while (true) {
                List<byte[]> cmd = readCommand(in);
                if (cmd == null) {
                    break;
                }
                byte[] reply = execute(cmd);
                // The reply goes out through a slice of this loop's pool,
                // and the connection keeps its last replies (read-ahead).
                Slice slice = pool.slice(Math.max(reply.length, 1));
                slice.buf.put(reply, 0, reply.length);
                kept.addLast(slice);
                while (kept.size() > retain) {
                    pool.release(kept.removeFirst());
                }
                out.write(reply);
                if (in.available() == 0) {
                    out.flush();
                }
            }
        } catch (IOException e) {
            // the client went away
        } finally {
            for (Slice sl : kept) {
                pool.release(sl);
            }
        }
    }

    static List<byte[]> readCommand(InputStream in) throws IOException {
        int c = in.read();
        if (c == -1) {
            return null;
        }
        if (c != '*') {
            throw new IOException("not RESP");
        }
        int n = (int) readNumber(in);
        List<byte[]> parts = new ArrayList<>(n);
        for (int i = 0; i < n; i++) {
            if (in.read() != '$') {
                throw new IOException("not a bulk string");
            }
            int len = (int) readNumber(in);
            byte[] b = in.readNBytes(len);
            in.read();
            in.read();
            parts.add(b);
        }
        return parts;
    }

    static long readNumber(InputStream in) throws IOException {
        long n = 0;
        boolean neg = false;
        int c;
        while ((c = in.read()) != '\r') {
            if (c == -1) {
                throw new EOFException();
            }
            if (c == '-') {
                neg = true;
            } else {
                n = n * 10 + (c - '0');
            }
        }
        in.read();
        return neg ? -n : n;
    }

    static byte[] bulk(byte[] v) {
        if (v == null) {
            return "$-1\r\n".getBytes(StandardCharsets.ISO_8859_1);
        }
        byte[] head = ("$" + v.length + "\r\n").getBytes(StandardCharsets.ISO_8859_1);
        byte[] out = new byte[head.length + v.length + 2];
        System.arraycopy(head, 0, out, 0, head.length);
        System.arraycopy(v, 0, out, head.length, v.length);
        out[out.length - 2] = '\r';
        out[out.length - 1] = '\n';
        return out;
    }

    static byte[] simple(String s) {
        return (s + "\r\n").getBytes(StandardCharsets.ISO_8859_1);
    }

    static byte[] execute(List<byte[]> cmd) throws IOException {
        String name = new String(cmd.get(0), StandardCharsets.ISO_8859_1).toUpperCase(Locale.ROOT);
        String key = cmd.size() > 1 ? new String(cmd.get(1), StandardCharsets.ISO_8859_1) : "";
        switch (name) {
            case "PING": return simple("+PONG");
            case "ECHO": return bulk(cmd.get(1));
            case "SET": {
                byte[] v = cmd.get(2);
                if (deflate) {
                    // Per request, on this thread: zlib's state is malloc'd.
                    Deflater d = new Deflater();
                    d.setInput(v);
                    d.finish();
                    byte[] buf = new byte[v.length + 64];
                    while (!d.finished()) {
                        d.deflate(buf);
                    }
                    d.end();
                }
                append('S', key, v);
                DATA.put(key, v);
                return simple("+OK");
            }
            case "GET": return bulk(DATA.get(key));
            case "DEL": {
                int n = 0;
                for (int i = 1; i < cmd.size(); i++) {
                    String k = new String(cmd.get(i), StandardCharsets.ISO_8859_1);
                    if (DATA.containsKey(k)) {
                        append('D', k, null);
                        DATA.remove(k);
                        n++;
                    }
                }
                return simple(":" + n);
            }
            case "EXISTS": {
                int n = 0;
                for (int i = 1; i < cmd.size(); i++) {
                    n += DATA.containsKey(new String(cmd.get(i), StandardCharsets.ISO_8859_1)) ? 1 : 0;
                }
                return simple(":" + n);
            }
            case "MGET": {
                ByteArrayOutputStream out = new ByteArrayOutputStream();
                out.write(simple("*" + (cmd.size() - 1)));
                for (int i = 1; i < cmd.size(); i++) {
                    out.write(bulk(DATA.get(new String(cmd.get(i), StandardCharsets.ISO_8859_1))));
                }
                return out.toByteArray();
            }
            case "DBSIZE": return simple(":" + DATA.size());
            case "INFO": return bulk(("# Server\r\nsoak_jvm_node:1\r\n").getBytes(StandardCharsets.ISO_8859_1));
            default: return simple("-ERR unknown command '" + name + "'");
        }
    }

    static void serveMetrics(int port) throws IOException {
        HttpServer http = HttpServer.create(new InetSocketAddress(InetAddress.getLoopbackAddress(), port), 0);
        http.createContext("/metrics", ex -> {
            StringBuilder b = new StringBuilder();
            MemoryMXBean mem = ManagementFactory.getMemoryMXBean();
            gauge(b, "jvm_heap_used_bytes", mem.getHeapMemoryUsage().getUsed());
            gauge(b, "jvm_heap_committed_bytes", mem.getHeapMemoryUsage().getCommitted());
            gauge(b, "jvm_heap_max_bytes", mem.getHeapMemoryUsage().getMax());
            gauge(b, "jvm_nonheap_used_bytes", mem.getNonHeapMemoryUsage().getUsed());
            for (BufferPoolMXBean p : ManagementFactory.getPlatformMXBeans(BufferPoolMXBean.class)) {
                if (p.getName().equals("direct")) {
                    gauge(b, "jvm_direct_used_bytes", p.getMemoryUsed());
                }
            }
            gauge(b, "jvm_threads", Thread.activeCount());
            long chunks = 0, used = 0;
            for (Pool p : POOLS) {
                chunks += p.chunkBytes.get();
                used += p.usedBytes.get();
            }
            gauge(b, "allocator_resident_bytes", chunks);
            gauge(b, "allocator_allocated_bytes", used);
            gauge(b, "allocator_free_bytes", chunks - used);
            gauge(b, "soak_jvm_event_loops", POOLS.size());
            byte[] body = b.toString().getBytes(StandardCharsets.UTF_8);
            ex.getResponseHeaders().add("Content-Type", "text/plain; version=0.0.4");
            ex.sendResponseHeaders(200, body.length);
            try (OutputStream o = ex.getResponseBody()) {
                o.write(body);
            }
        });
        http.setExecutor(Executors.newSingleThreadExecutor(r -> {
            Thread t = new Thread(r, "metrics");
            t.setDaemon(true);
            return t;
        }));
        http.start();
    }

    static void gauge(StringBuilder b, String name, long v) {
        b.append("# TYPE ").append(name).append(" gauge\n").append(name).append(' ').append(v).append('\n');
    }
}
