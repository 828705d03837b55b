// A real Apache Curator InterProcessMutex, driven line by line from Python (labkit/curator.py),
// so that labkit's ZooKeeper locks can be shown to queue correctly with Curator's.
//
// Usage: java -cp <jars>:<dir> CuratorPeer <connect string> <lock path> [session ms] [identifier]
//        [connection ms] [max leases]
// With max leases > 0 the peer holds leases of an InterProcessSemaphoreV2 on the path instead
// of the mutex (leases under <path>/leases, its internal mutex under <path>/locks).
// Reads commands on stdin, one per line:
//   acquire <seconds>   -> "ACQUIRED <node path> <its czxid> <nanoTime when acquire() returned>"
//                          or "TIMEOUT"
//   release             -> "RELEASED <nanoTime when release() began> <nanoTime when it returned>"
//                          (the stamps time a hand-off between JVMs: labkit/bench/processes)
//   cycle               -> "CYCLE <ns>": acquire and release once, timed inside the JVM with
//                          System.nanoTime() (no czxid read), for the benchmark
//   ping                -> "PONG": the cost of a line there and back, to subtract by eye
//   crowd, handoff, disband -> N contenders handing a lock on inside this JVM (CuratorHandoff.java)
//   quit                -> "BYE", then exits (closing the client ends the session)
// At start it prints "READY <session id in hex> <negotiated session ms> <nanoTime>" once
// connected. At any time it may print "STATE <SUSPENDED|RECONNECTED|LOST> <nanoTime>" (a
// connection state, stamped when Curator called the listener) and "ERROR <message>".
// nanoTime is System.nanoTime(): CLOCK_MONOTONIC on Linux, the clock of Python's
// time.monotonic(), so Python can place the states on its own time line (curator.py checks it).
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.TimeUnit;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessSemaphoreV2;
import org.apache.curator.framework.recipes.locks.Lease;
import org.apache.curator.framework.state.ConnectionState;
import org.apache.curator.retry.ExponentialBackoffRetry;
import org.apache.zookeeper.data.Stat;

public class CuratorPeer {
    /** Stock InterProcessMutex, through its two protected hooks: the path of its own node
     *  made visible, and the identifier stored as node data (as kazoo and labkit do). */
    static class VisibleMutex extends InterProcessMutex {
        private final byte[] identifier;

        VisibleMutex(CuratorFramework client, String path, String identifier) {
            super(client, path);
            this.identifier = identifier.getBytes(StandardCharsets.UTF_8);
        }

        String ownNode() {
            return getLockPath();
        }

        @Override
        protected byte[] getLockNodeBytes() {
            return identifier;
        }
    }

    static synchronized void say(String line) {
        System.out.println(line);
        System.out.flush();
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 2) {
            System.err.println("usage: CuratorPeer <connect string> <lock path> [session ms] [identifier] [connection ms]");
            System.exit(2);
        }
        int sessionMs = args.length > 2 ? Integer.parseInt(args[2]) : 4000;
        int connectionMs = args.length > 4 ? Integer.parseInt(args[4]) : 15000;
        // Curator's defaults otherwise: StandardConnectionStateErrorPolicy (SUSPENDED and LOST
        // are both errors) and a simulated LOST once SUSPENDED has lasted the negotiated
        // session timeout (simulatedSessionExpirationPercent 100).
        CuratorFramework client = CuratorFrameworkFactory.newClient(
            args[0], sessionMs, connectionMs, new ExponentialBackoffRetry(100, 5));
        client.getConnectionStateListenable().addListener((unused, state) -> {
            long now = System.nanoTime();
            if (state == ConnectionState.SUSPENDED || state == ConnectionState.RECONNECTED
                    || state == ConnectionState.LOST) {
                say("STATE " + state.name() + " " + now);
            }
        });
        client.start();
        try {
            if (!client.blockUntilConnected(20, TimeUnit.SECONDS)) {
                say("ERROR no connection to ZooKeeper at " + args[0] + " within 20 s");
                return;
            }
            long session = client.getZookeeperClient().getZooKeeper().getSessionId();
            int negotiated = client.getZookeeperClient().getZooKeeper().getSessionTimeout();
            say("READY " + Long.toHexString(session) + " " + negotiated + " " + System.nanoTime());
            String identifier = args.length > 3 ? args[3] : "curator";
            int maxLeases = args.length > 5 ? Integer.parseInt(args[5]) : 0;
            if (maxLeases > 0) {
                InterProcessSemaphoreV2 semaphore = new InterProcessSemaphoreV2(client, args[1], maxLeases);
                semaphore.setNodeData(identifier.getBytes(StandardCharsets.UTF_8));
                serveSemaphore(client, semaphore, args[1]);
            } else {
                serve(client, new VisibleMutex(client, args[1], identifier), args[1], args[0], sessionMs, connectionMs);
            }
        } finally {
            client.close();
        }
    }

    // InterProcessMutex belongs to the thread that acquired it: every command runs here,
    // on the main thread, one at a time.
    static void serve(CuratorFramework client, VisibleMutex mutex, String path, String connect, int sessionMs,
                      int connectionMs)
            throws Exception {
        BufferedReader input = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        CuratorHandoff crowd = null;
        String line;
        try {
            while ((line = input.readLine()) != null) {
                String[] words = line.trim().split("\\s+");
                if (words[0].equals("quit")) {
                    say("BYE");
                    return;
                }
                if (words[0].equals("crowd") || words[0].equals("handoff") || words[0].equals("disband")) {
                    crowd = serveCrowd(words, crowd, client, path, connect, sessionMs, connectionMs);
                } else {
                    serveOne(client, mutex, line, words);
                }
            }
        } finally {
            if (crowd != null) {
                crowd.close();
            }
        }
    }

    // The hand-off commands (CuratorHandoff.java); returns the crowd that is queued, if any.
    static CuratorHandoff serveCrowd(String[] words, CuratorHandoff crowd, CuratorFramework client, String path,
                                     String connect, int sessionMs, int connectionMs) {
        try {
            if (words[0].equals("crowd")) {
                if (crowd != null) {
                    crowd.close();
                    crowd = null;
                }
                int n = Integer.parseInt(words[1]);
                if (n < 2) {
                    throw new IllegalArgumentException("a hand-off needs at least 2 contenders, got " + n);
                }
                crowd = new CuratorHandoff(client, connect, sessionMs, connectionMs, path + "-handoff", n,
                                           words[2].equals("shared"), Double.parseDouble(words[3]));
                say("QUEUED " + n);
            } else if (words[0].equals("handoff")) {
                if (crowd == null) {
                    throw new IllegalStateException("no crowd is queued: send crowd <n> <own|shared> <seconds> first");
                }
                say(crowd.handOff(Double.parseDouble(words[1])));
            } else {
                if (crowd != null) {
                    crowd.close();
                }
                say("DISBANDED");
                return null;
            }
        } catch (Exception error) {
            if (crowd != null && words[0].equals("crowd")) {
                crowd.close();
                crowd = null;
            }
            say("ERROR " + error.toString().replace('\n', ' '));
        }
        return crowd;
    }

    // "ACQUIRED <node> <czxid>" for a node just acquired, or "GONE <node>" when it is gone
    // already: its session expired between the grant and this read (a stalled machine).
    static String heldAnswer(CuratorFramework client, String node) throws Exception {
        Stat stat = client.checkExists().forPath(node);
        return stat == null ? "GONE " + node : "ACQUIRED " + node + " " + stat.getCzxid();
    }

    // One command of the single lock (acquire, release, cycle, ping), on the main thread.
    static void serveOne(CuratorFramework client, VisibleMutex mutex, String line, String[] words) {
        try {
            switch (words[0]) {
                case "acquire":
                    long millis = (long) (Double.parseDouble(words[1]) * 1000);
                    if (mutex.acquire(millis, TimeUnit.MILLISECONDS)) {
                        long acquired = System.nanoTime();
                        // the czxid of my node is the fencing token, as for labkit's recipe
                        String node = mutex.ownNode();
                        String held = heldAnswer(client, node);
                        say(held.startsWith("GONE") ? held : held + " " + acquired);
                    } else {
                        say("TIMEOUT");
                    }
                    break;
                case "release":
                    long began = System.nanoTime();
                    mutex.release();
                    say("RELEASED " + began + " " + System.nanoTime());
                    break;
                case "cycle":
                    long started = System.nanoTime();
                    mutex.acquire();
                    mutex.release();
                    say("CYCLE " + (System.nanoTime() - started));
                    break;
                case "ping":
                    say("PONG");
                    break;
                default:
                    say("ERROR unknown command '" + line.trim() + "': use acquire <seconds>, release, cycle, ping, "
                        + "crowd <n> <own|shared> <seconds>, handoff <seconds>, disband or quit");
            }
        } catch (Exception error) {
            say("ERROR " + error.toString().replace('\n', ' '));
        }
    }

    // The same commands for a semaphore: acquire takes one lease, release returns it.
    static void serveSemaphore(CuratorFramework client, InterProcessSemaphoreV2 semaphore, String path)
            throws Exception {
        BufferedReader input = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        Lease lease = null;
        String line;
        while ((line = input.readLine()) != null) {
            String[] words = line.trim().split("\\s+");
            try {
                switch (words[0]) {
                    case "acquire":
                        long millis = (long) (Double.parseDouble(words[1]) * 1000);
                        lease = semaphore.acquire(millis, TimeUnit.MILLISECONDS);
                        if (lease != null) {
                            String node = path + "/leases/" + lease.getNodeName();
                            say(heldAnswer(client, node));
                        } else {
                            say("TIMEOUT");
                        }
                        break;
                    case "release":
                        if (lease != null) {
                            semaphore.returnLease(lease);
                            lease = null;
                        }
                        say("RELEASED");
                        break;
                    case "quit":
                        say("BYE");
                        return;
                    default:
                        say("ERROR unknown command '" + line.trim() + "': use acquire <seconds>, release or quit");
                }
            } catch (Exception error) {
                say("ERROR " + error.toString().replace('\n', ' '));
            }
        }
    }
}
