// A Curator LeaderLatch participant for the interop test. Usage:
//   java CuratorLatch <connect> <latch path> <id>
// Reads commands on stdin: "state" prints "leader=<true|false> holder=<id>", "close"
// closes the latch (giving up leadership) and exits. Prints "leader <nanoTime>" (the
// CLOCK_MONOTONIC nanoseconds on Linux) when it becomes leader, and "connection
// <STATE>" at each change of its connection: a latch that did not lead puts its node
// again, at the end of the queue, when its connection comes back (RECONNECTED).
import java.io.BufferedReader;
import java.io.InputStreamReader;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.leader.LeaderLatch;
import org.apache.curator.framework.recipes.leader.LeaderLatchListener;
import org.apache.curator.retry.RetryOneTime;

public class CuratorLatch {
    public static void main(String[] args) throws Exception {
        CuratorFramework client = CuratorFrameworkFactory.builder()
            .connectString(args[0])
            .sessionTimeoutMs(4000)
            .connectionTimeoutMs(4000)
            .retryPolicy(new RetryOneTime(100))
            .build();
        client.getConnectionStateListenable().addListener((c, state) -> {
            System.out.println("connection " + state);
            System.out.flush();
        });
        client.start();
        client.blockUntilConnected();
        LeaderLatch latch = new LeaderLatch(client, args[1], args[2]);
        // "leader <CLOCK_MONOTONIC ns>" when elected, for the benchmark.
        latch.addListener(new LeaderLatchListener() {
            public void isLeader() {
                System.out.println("leader " + System.nanoTime());
                System.out.flush();
            }

            public void notLeader() {}
        });
        latch.start();
        System.out.println("started");
        System.out.flush();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        String line;
        while ((line = in.readLine()) != null) {
            if (line.equals("state")) {
                String holder = "";
                try {
                    holder = latch.getLeader().getId();
                } catch (Exception e) {
                    holder = "";
                }
                System.out.println("leader=" + latch.hasLeadership() + " holder=" + holder);
                System.out.flush();
            } else if (line.equals("close")) {
                break;
            }
        }
        latch.close();
        client.close();
    }
}
