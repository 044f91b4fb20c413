// NettyKv: a key-value service on Netty's PooledByteBufAllocator, for
// HDDS-16728 on the real library (seed 004).
//
// It speaks RESP (SET, GET, MGET, DEL, EXISTS, PING, DBSIZE, INFO) on
// --port with --event-loops Netty event loops, and exports its JVM's and the
// pool's figures as Prometheus text on --metrics-port /metrics.
//
// What the seed describes, on Netty's own code:
//   - Netty puts each connection on one event loop, and the pooled allocator
//     gives each event loop thread an arena of its own: the node makes as
//     many direct arenas as event loops, as Netty's defaults do on the
//     seed's host (both are two per core there; on a 2-core machine Netty
//     would make 4 arenas, so the node says how many).
//   - A value is kept as a slice of the buffer that received it (the
//     decoder's retained slice, no copy), and a GET's reply is a slice of
//     that slice: a receive buffer stays allocated while any value in it
//     lives, and an arena cannot use another arena's free space.
//   - Direct buffers come from ByteBuffer.allocateDirect under
//     -XX:MaxDirectMemorySize (Netty on Java 9+ without --add-opens), so
//     the pool's failure is the JDK's "OutOfMemoryError: Cannot reserve ...
//     bytes of direct buffer memory": Netty closes the connection it was
//     reading, the node logs the error and goes on serving.
// Values live in memory only: the node is not durable across kills.
//
// The figures exported for soak: allocator_resident_bytes (the pool's
// chunks), allocator_allocated_bytes (bytes pinned by live buffers),
// allocator_free_bytes (the difference), netty_pool_chunks,
// netty_pool_arenas, netty_event_loops, jvm_direct_used_bytes and the heap.
//
// Built by nodes/netty/build against netty 4.2.18.Final from Maven Central.

import io.netty.bootstrap.ServerBootstrap;
import io.netty.buffer.ByteBuf;
import io.netty.buffer.PoolArenaMetric;
import io.netty.buffer.PooledByteBufAllocator;
import io.netty.channel.ChannelHandlerContext;
import io.netty.channel.ChannelInitializer;
import io.netty.channel.ChannelOption;
import io.netty.channel.EventLoopGroup;
import io.netty.channel.MultiThreadIoEventLoopGroup;
import io.netty.channel.nio.NioIoHandler;
import io.netty.channel.socket.nio.NioServerSocketChannel;
import io.netty.handler.codec.ByteToMessageDecoder;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.ServerSocketChannel;
import java.lang.management.BufferPoolMXBean;
import java.lang.management.ManagementFactory;
import java.lang.management.MemoryMXBean;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.nio.channels.SocketChannel;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;

public class NettyKv {
    static final ConcurrentHashMap<String, ByteBuf> DATA = new ConcurrentHashMap<>();
    static final AtomicLong OUT_OF_DIRECT = new AtomicLong();
    static PooledByteBufAllocator alloc;
    static int loops;

    public static void main(String[] args) throws Exception {
        int port = 0, metricsPort = 0;
        loops = 2;
        int maxOrder = 9; // 8 KiB pages << 9 = 4 MiB chunks, Netty's default
        for (int i = 0; i < args.length; i++) {
            switch (args[i]) {
                case "--port": port = Integer.parseInt(args[++i]); break;
                case "--metrics-port": metricsPort = Integer.parseInt(args[++i]); break;
                case "--event-loops": loops = Integer.parseInt(args[++i]); break;
                case "--max-order": maxOrder = Integer.parseInt(args[++i]); break;
                default:
                    System.err.println("NettyKv: unknown argument " + args[i]);
                    System.exit(2);
            }
        }
        if (port == 0 || metricsPort == 0) {
            System.err.println("usage: NettyKv --port P --metrics-port M [--event-loops N] [--max-order K]");
            System.exit(2);
        }
        alloc = new PooledByteBufAllocator(true, 0, loops, 8192, maxOrder,
                PooledByteBufAllocator.defaultSmallCacheSize(),
                PooledByteBufAllocator.defaultNormalCacheSize(),
                PooledByteBufAllocator.defaultUseCacheForAllThreads());
        serveMetrics(metricsPort);
        EventLoopGroup boss = new MultiThreadIoEventLoopGroup(1, NioIoHandler.newFactory());
        EventLoopGroup workers = new MultiThreadIoEventLoopGroup(loops, NioIoHandler.newFactory());
        ServerBootstrap b = new ServerBootstrap()
                .group(boss, workers)
                .channel(NioServerSocketChannel.class)
                .childOption(ChannelOption.ALLOCATOR, alloc)
                .childOption(ChannelOption.TCP_NODELAY, true)
                .childHandler(new ChannelInitializer<io.netty.channel.socket.SocketChannel>() {
                    @Override
                    protected void initChannel(io.netty.channel.socket.SocketChannel ch) {
                        ch.pipeline().addLast(new Resp());
                    }
                });
        b.bind(InetAddress.getLoopbackAddress(), port).sync();
        System.out.println("NettyKv ready on 127.0.0.1:" + port + " with " + loops
                + " event loops, " + alloc.metric().numDirectArenas() + " direct arenas of "
                + (alloc.metric().chunkSize() >> 20) + " MiB chunks");
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            workers.shutdownGracefully();
            boss.shutdownGracefully();
        }));
    }

    /** RESP arrays of bulk strings, each argument a retained slice of the buffer that received it. */
    static final class Resp extends ByteToMessageDecoder {
        @Override
        protected void decode(ChannelHandlerContext ctx, ByteBuf in, List<Object> out) {
            while (true) {
                int start = in.readerIndex();
                List<ByteBuf> cmd = parse(in);
                if (cmd == null) {
                    in.readerIndex(start);
                    return;
                }
                try {
                    execute(ctx, cmd);
                } finally {
                    for (ByteBuf a : cmd) {
                        a.release();
                    }
                }
            }
        }

        @Override
        public void channelReadComplete(ChannelHandlerContext ctx) throws Exception {
            ctx.flush();
            super.channelReadComplete(ctx);
        }

        @Override
        public void exceptionCaught(ChannelHandlerContext ctx, Throwable cause) {
            if (cause instanceof OutOfMemoryError) {
                OUT_OF_DIRECT.incrementAndGet();
            }
            System.err.println("NettyKv: connection " + ctx.channel().remoteAddress()
                    + " on " + Thread.currentThread().getName() + " closed: " + cause);
            ctx.close();
        }
    }

    /** One command, or null (and no slice kept) when it has not all come. */
    static List<ByteBuf> parse(ByteBuf in) {
        long n = number(in, '*');
        if (n < 0) {
            return null;
        }
        List<ByteBuf> args = new ArrayList<>((int) n);
        for (long i = 0; i < n; i++) {
            long len = number(in, '$');
            if (len < 0 || in.readableBytes() < len + 2) {
                for (ByteBuf a : args) {
                    a.release();
                }
                return null;
            }
            args.add(in.readRetainedSlice((int) len));
            in.skipBytes(2);
        }
        return args;
    }

    /** A line "<kind><digits>\r\n", or -1 when it has not all come. */
    static long number(ByteBuf in, char kind) {
        int eol = in.indexOf(in.readerIndex(), in.writerIndex(), (byte) '\n');
        if (eol < 0 || in.readableBytes() < 3) {
            return -1;
        }
        byte first = in.readByte();
        if (first != kind) {
            throw new IllegalStateException("expected '" + kind + "', got byte " + first);
        }
        long v = 0;
        for (int i = in.readerIndex(); i < eol - 1; i++) {
            v = v * 10 + (in.getByte(i) - '0');
        }
        in.readerIndex(eol + 1);
        return v;
    }

    static void execute(ChannelHandlerContext ctx, List<ByteBuf> cmd) {
        String name = cmd.get(0).toString(StandardCharsets.ISO_8859_1).toUpperCase();
        switch (name) {
            case "PING": simple(ctx, "+PONG"); break;
            case "SET": {
                ByteBuf value = cmd.get(2).retain();
                ByteBuf old = DATA.put(key(cmd.get(1)), value);
                if (old != null) {
                    old.release();
                }
                simple(ctx, "+OK");
                break;
            }
            case "GET": get(ctx, key(cmd.get(1))); break;
            case "MGET": {
                simple(ctx, "*" + (cmd.size() - 1));
                for (int i = 1; i < cmd.size(); i++) {
                    get(ctx, key(cmd.get(i)));
                }
                break;
            }
            case "DEL":
            case "EXISTS": {
                int n = 0;
                for (int i = 1; i < cmd.size(); i++) {
                    if (name.equals("DEL")) {
                        ByteBuf old = DATA.remove(key(cmd.get(i)));
                        if (old != null) {
                            old.release();
                            n++;
                        }
                    } else if (DATA.containsKey(key(cmd.get(i)))) {
                        n++;
                    }
                }
                simple(ctx, ":" + n);
                break;
            }
            case "DBSIZE": simple(ctx, ":" + DATA.size()); break;
            case "INFO": bulk(ctx, "# Server\r\nnetty_kv:1\r\n"); break;
            case "COMMAND":
            case "CLIENT":
            case "SELECT": simple(ctx, "+OK"); break;
            default: simple(ctx, "-ERR unknown command '" + name + "'");
        }
    }

    static String key(ByteBuf b) {
        return b.toString(StandardCharsets.ISO_8859_1);
    }

    /** The reply is a slice of the value, itself a slice of the buffer that received it. */
    static void get(ChannelHandlerContext ctx, String key) {
        ByteBuf[] reply = new ByteBuf[1];
        DATA.computeIfPresent(key, (k, v) -> {
            reply[0] = v.retainedDuplicate();
            return v;
        });
        if (reply[0] == null) {
            simple(ctx, "$-1");
            return;
        }
        simple(ctx, "$" + reply[0].readableBytes());
        ctx.write(reply[0]);
        ctx.write(ascii(ctx, "\r\n"));
    }

    static void simple(ChannelHandlerContext ctx, String line) {
        ctx.write(ascii(ctx, line + "\r\n"));
    }

    static void bulk(ChannelHandlerContext ctx, String s) {
        simple(ctx, "$" + s.length());
        ctx.write(ascii(ctx, s + "\r\n"));
    }

    static ByteBuf ascii(ChannelHandlerContext ctx, String s) {
        ByteBuf b = ctx.alloc().buffer(s.length());
        b.writeCharSequence(s, StandardCharsets.ISO_8859_1);
        return b;
    }

    /**
     * /metrics on a plain blocking channel whose buffers are reserved once,
     * at start: the JDK's HTTP server takes a temporary direct buffer for
     * every write, and a pool at -XX:MaxDirectMemorySize would leave the
     * metrics that explain its failure unable to be served.
     */
    static void serveMetrics(int port) throws IOException {
        ServerSocketChannel server = ServerSocketChannel.open();
        server.bind(new InetSocketAddress(InetAddress.getLoopbackAddress(), port));
        ByteBuffer in = ByteBuffer.allocateDirect(8192);
        ByteBuffer out = ByteBuffer.allocateDirect(64 * 1024);
        Thread t = new Thread(() -> {
            while (true) {
                try (SocketChannel c = server.accept()) {
                    in.clear();
                    while (in.hasRemaining() && !headersRead(in) && c.read(in) >= 0) {
                    }
                    byte[] body = metrics().getBytes(StandardCharsets.UTF_8);
                    out.clear();
                    out.put(("HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: "
                            + body.length + "\r\nConnection: close\r\n\r\n").getBytes(StandardCharsets.ISO_8859_1));
                    out.put(body);
                    out.flip();
                    while (out.hasRemaining()) {
                        c.write(out);
                    }
                } catch (IOException e) {
                    System.err.println("NettyKv: metrics: " + e);
                }
            }
        }, "metrics");
        t.setDaemon(true);
        t.start();
    }

    static boolean headersRead(ByteBuffer in) {
        int n = in.position();
        return n >= 4 && in.get(n - 4) == '\r' && in.get(n - 3) == '\n' && in.get(n - 2) == '\r' && in.get(n - 1) == '\n';
    }

    static String metrics() {
        StringBuilder b = new StringBuilder();
        MemoryMXBean mem = ManagementFactory.getMemoryMXBean();
        gauge(b, "jvm_heap_used_bytes", mem.getHeapMemoryUsage().getUsed());
        gauge(b, "jvm_heap_max_bytes", mem.getHeapMemoryUsage().getMax());
        gauge(b, "jvm_nonheap_used_bytes", mem.getNonHeapMemoryUsage().getUsed());
        for (BufferPoolMXBean p : ManagementFactory.getPlatformMXBeans(BufferPoolMXBean.class)) {
            if (p.getName().equals("direct")) {
                gauge(b, "jvm_direct_used_bytes", p.getMemoryUsed());
            }
        }
        long chunks = 0;
        for (PoolArenaMetric a : alloc.metric().directArenas()) {
            chunks += a.numActiveChunks();
        }
        long held = alloc.metric().usedDirectMemory();
        long pinned = alloc.pinnedDirectMemory();
        gauge(b, "allocator_resident_bytes", held);
        gauge(b, "allocator_allocated_bytes", pinned);
        gauge(b, "allocator_free_bytes", Math.max(0, held - pinned));
        gauge(b, "netty_pool_chunks", chunks);
        gauge(b, "netty_pool_arenas", alloc.metric().numDirectArenas());
        gauge(b, "netty_event_loops", loops);
        gauge(b, "netty_out_of_direct_memory_total", OUT_OF_DIRECT.get());
        return b.toString();
    }

    static void gauge(StringBuilder b, String name, long v) {
        b.append("# TYPE ").append(name).append(" gauge\n").append(name).append(' ').append(v).append('\n');
    }
}
