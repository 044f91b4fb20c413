// A JVM node of soak's tests whose memory grows outside its heap: it keeps
// a direct ByteBuffer of 1 MiB every 250 ms (4 MiB/s), which Native Memory
// Tracking counts under "Other". Run with the source launcher:
//   java -Xmx64m -XX:MaxDirectMemorySize=2g DirectLeak.java
// It prints "ready" when it has started, and runs until it is signalled.
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;

public class DirectLeak {
    public static void main(String[] args) throws InterruptedException {
        List<ByteBuffer> kept = new ArrayList<>();
        System.out.println("ready");
        System.out.flush();
        while (true) {
            ByteBuffer b = ByteBuffer.allocateDirect(1 << 20);
            for (int i = 0; i < b.capacity(); i += 4096) {
                b.put(i, (byte) 1);
            }
            kept.add(b);
            Thread.sleep(250);
        }
    }
}
