// A Curator InterProcessReadWriteLock user for the interop test. Usage:
//   java CuratorRwLock <connect> <lock path>
// Reads commands on stdin: "read" or "write" takes that side of the lock (in a
// thread of its own, which prints "held <ns>" once it has it, <ns> its
// System.nanoTime(), CLOCK_MONOTONIC on Linux, the clock of the sidecars'
// transition logs), "release" lets it go (printing "released"), "close" exits.
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.util.concurrent.SynchronousQueue;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;
import org.apache.curator.retry.RetryOneTime;

public class CuratorRwLock {
    public static void main(String[] args) throws Exception {
        CuratorFramework client = CuratorFrameworkFactory.builder()
            .connectString(args[0])
            .sessionTimeoutMs(4000)
            .connectionTimeoutMs(4000)
            .retryPolicy(new RetryOneTime(100))
            .build();
        client.start();
        client.blockUntilConnected();
        InterProcessReadWriteLock lock = new InterProcessReadWriteLock(client, args[1]);
        SynchronousQueue<String> release = new SynchronousQueue<>();
        System.out.println("started");
        System.out.flush();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        String line;
        while ((line = in.readLine()) != null) {
            if (line.equals("read") || line.equals("write")) {
                // A mutex is released by the thread that took it.
                InterProcessMutex m = line.equals("read") ? lock.readLock() : lock.writeLock();
                new Thread(() -> {
                    try {
                        m.acquire();
                        System.out.println("held " + System.nanoTime());
                        System.out.flush();
                        release.take();
                        m.release();
                        System.out.println("released");
                        System.out.flush();
                    } catch (Exception e) {
                        System.out.println("error " + e);
                        System.out.flush();
                    }
                }).start();
            } else if (line.equals("release")) {
                release.put("go");
            } else if (line.equals("close")) {
                break;
            }
        }
        client.close();
        System.exit(0);
    }
}
