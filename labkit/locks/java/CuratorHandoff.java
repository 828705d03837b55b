// N contenders of one Curator InterProcessMutex inside this JVM, handed the lock one release at
// a time, for the benchmark (labkit/bench/peers.py). CuratorPeer's commands drive it:
//   crowd <n> <own|shared> <seconds> -> "QUEUED <n>": contender-0 holds, the other n - 1 wait.
//       own: a CuratorFramework (a session) per contender, as labkit's hand-off gives each
//       contender its own; shared: one CuratorFramework for all, as Curator users usually do.
//   handoff <seconds> -> "HANDOFF <from> <to> <asked> <release start> <release return> <woke>
//       <acquired> <overlaps>": once every contender still waiting has its node (the
//       children count is checked, polled with a deadline), the holder's thread is told to
//       release; the line says when (System.nanoTime) it was asked, its release() began and
//       returned, the watch on its node fired in the next holder's client (-1 if not seen),
//       and the next holder's acquire() returned; overlaps counts moments with two holders.
//   disband -> "DISBANDED": every thread stopped, every client it opened closed.
// Each contender's thread runs acquire() and, when told, release(): InterProcessMutex belongs
// to the thread that acquired it.
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLongArray;
import java.util.concurrent.atomic.AtomicReferenceArray;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.retry.ExponentialBackoffRetry;
import org.apache.curator.utils.ZookeeperFactory;
import org.apache.zookeeper.AsyncCallback;
import org.apache.zookeeper.Watcher;
import org.apache.zookeeper.ZooKeeper;
import org.apache.zookeeper.client.ZKClientConfig;
import org.apache.zookeeper.data.Stat;

final class CuratorHandoff implements AutoCloseable {
    /** When a watch fired, by the path it watched (the first NodeDeleted event on it). */
    static final Map<String, Long> FIRED = new ConcurrentHashMap<>();

    /** The stock ZooKeeper client, but every data watch it is given is stamped when it fires:
     *  Curator's waiter watches its predecessor's node with getData(path, watcher, ...). */
    static final class StampingZooKeeper extends ZooKeeper {
        StampingZooKeeper(String connect, int sessionMs, Watcher watcher, boolean readOnly, ZKClientConfig config)
                throws java.io.IOException {
            super(connect, sessionMs, watcher, readOnly, config == null ? new ZKClientConfig() : config);
        }

        static Watcher stamped(String path, Watcher watcher) {
            return watcher == null ? null : event -> {
                if (event.getType() == Watcher.Event.EventType.NodeDeleted) {
                    FIRED.putIfAbsent(path, System.nanoTime());
                }
                watcher.process(event);
            };
        }

        @Override
        public byte[] getData(String path, Watcher watcher, Stat stat)
                throws org.apache.zookeeper.KeeperException, InterruptedException {
            return super.getData(path, stamped(path, watcher), stat);
        }

        @Override
        public void getData(String path, Watcher watcher, AsyncCallback.DataCallback callback, Object context) {
            super.getData(path, stamped(path, watcher), callback, context);
        }
    }

    /** Curator makes its ZooKeeper through this (both of the factory's methods: Curator 5 calls
     *  the one with a ZKClientConfig). */
    static final class StampingFactory implements ZookeeperFactory {
        @Override
        public ZooKeeper newZooKeeper(String connect, int sessionMs, Watcher watcher, boolean readOnly)
                throws java.io.IOException {
            return new StampingZooKeeper(connect, sessionMs, watcher, readOnly, null);
        }

        @Override
        public ZooKeeper newZooKeeper(String connect, int sessionMs, Watcher watcher, boolean readOnly,
                                      ZKClientConfig config) throws java.io.IOException {
            return new StampingZooKeeper(connect, sessionMs, watcher, readOnly, config);
        }
    }

    private final CuratorFramework reader;        // the peer's own client: reads the queue
    private final String path;
    private final int n;
    private final List<CuratorFramework> clients = new ArrayList<>();
    private final List<CuratorPeer.VisibleMutex> mutexes = new ArrayList<>();
    private final List<Thread> threads = new ArrayList<>();
    private final List<Semaphore> letGo = new ArrayList<>();
    private final LinkedBlockingQueue<Integer> acquired = new LinkedBlockingQueue<>();
    private final AtomicLongArray acquiredAt, releaseStart, releaseReturn;
    private final AtomicReferenceArray<String> nodes;   // each holder's node, seen from its own thread
    private final AtomicInteger holders = new AtomicInteger();
    private final AtomicInteger overlaps = new AtomicInteger();
    private final List<String> errors = new java.util.concurrent.CopyOnWriteArrayList<>();
    private volatile boolean closing = false;
    private int holder = -1;
    private int handedOn = 0;

    CuratorHandoff(CuratorFramework reader, String connect, int sessionMs, int connectionMs,
                   String path, int n, boolean shared, double seconds) throws Exception {
        this.reader = reader;
        this.path = path;
        this.n = n;
        acquiredAt = new AtomicLongArray(n);
        releaseStart = new AtomicLongArray(n);
        releaseReturn = new AtomicLongArray(n);
        nodes = new AtomicReferenceArray<>(n);
        try {
            start(connect, sessionMs, connectionMs, shared, seconds);
        } catch (Exception error) {
            close();                              // every client opened so far, every thread started
            throw error;
        }
    }

    private void start(String connect, int sessionMs, int connectionMs, boolean shared, double seconds)
            throws Exception {
        long deadline = System.nanoTime() + (long) (seconds * 1e9);
        for (int i = 0; i < (shared ? 1 : n); i++) {
            // no ensemble tracker: its watch on /zookeeper/config would blur the server's watch count
            CuratorFramework client = CuratorFrameworkFactory.builder().connectString(connect)
                .sessionTimeoutMs(sessionMs).connectionTimeoutMs(connectionMs).ensembleTracker(false)
                .retryPolicy(new ExponentialBackoffRetry(100, 5)).zookeeperFactory(new StampingFactory()).build();
            clients.add(client);
            client.start();
        }
        for (CuratorFramework client : clients) {
            if (!client.blockUntilConnected((int) Math.max(1, (deadline - System.nanoTime()) / 1_000_000),
                                            TimeUnit.MILLISECONDS)) {
                throw new IllegalStateException(clients.size() + " clients did not all connect within " + seconds + " s");
            }
        }
        for (int i = 0; i < n; i++) {
            mutexes.add(new CuratorPeer.VisibleMutex(clients.get(shared ? 0 : i), path, "contender-" + i));
            letGo.add(new Semaphore(0));
            final int number = i;
            Thread thread = new Thread(() -> contend(number), "contender-" + i);
            thread.setDaemon(true);               // one stuck in Curator never keeps the JVM alive
            threads.add(thread);
        }
        threads.get(0).start();                   // the first holder holds before anyone queues
        Integer first = acquired.poll(Math.max(0, deadline - System.nanoTime()), TimeUnit.NANOSECONDS);
        if (first == null) {
            throw new IllegalStateException("contender-0 did not take " + path + " within " + seconds + " s: " + errors);
        }
        holder = first;
        for (int i = 1; i < n; i++) {
            threads.get(i).start();
        }
        awaitQueue(n, deadline);
    }

    private void contend(int number) {
        CuratorPeer.VisibleMutex mutex = mutexes.get(number);
        boolean held = false;
        try {
            mutex.acquire();
            held = true;
            long now = System.nanoTime();
            if (holders.incrementAndGet() > 1) {
                overlaps.incrementAndGet();
            }
            nodes.set(number, mutex.ownNode());   // per thread in InterProcessMutex: read it here
            acquiredAt.set(number, now);
            acquired.add(number);
            letGo.get(number).acquire();          // until handoff (or disband) says so
            releaseStart.set(number, System.nanoTime());
            holders.decrementAndGet();
            held = false;
            mutex.release();
            releaseReturn.set(number, System.nanoTime());
        } catch (InterruptedException stopped) {
            // disband: a waiter leaves the queue (Curator deletes its node on the way out)
        } catch (Exception error) {
            if (!closing) {
                errors.add("contender-" + number + ": " + error);
            }
        } finally {
            if (held) {                           // told to stop while holding: let go cleanly
                holders.decrementAndGet();
                try {
                    mutex.release();
                } catch (Exception ignored) {
                    // its session closes next
                }
            }
        }
    }

    /** Poll the children count of the lock path until it is ``count``, or fail at the deadline. */
    private void awaitQueue(int count, long deadline) throws Exception {
        int seen = -1;
        while (System.nanoTime() < deadline && errors.isEmpty()) {
            seen = reader.getChildren().forPath(path).size();
            if (seen == count) {
                return;
            }
            Thread.sleep(1);
        }
        throw new IllegalStateException(count + " contenders should be queued on " + path + ", "
                                        + seen + " are (errors: " + errors + ")");
    }

    String handOff(double seconds) throws Exception {
        long deadline = System.nanoTime() + (long) (seconds * 1e9);
        if (handedOn >= n - 1) {
            throw new IllegalStateException("every contender has held the lock: disband and queue a new crowd");
        }
        awaitQueue(n - handedOn, deadline);
        int from = holder;
        String node = nodes.get(from);
        long asked = System.nanoTime();
        letGo.get(from).release();
        Integer to = acquired.poll(Math.max(0, deadline - System.nanoTime()), TimeUnit.NANOSECONDS);
        if (to == null) {
            throw new IllegalStateException("nobody took the lock within " + seconds + " s of the release: " + errors);
        }
        while (releaseReturn.get(from) == 0) {    // the holder's release() returns about now
            if (System.nanoTime() > deadline) {
                throw new IllegalStateException("contender-" + from + "'s release() did not return: " + errors);
            }
            Thread.sleep(0, 100_000);
        }
        holder = to;
        handedOn++;
        Long woke = node == null ? null : FIRED.remove(node);
        return "HANDOFF " + from + " " + to + " " + asked + " " + releaseStart.get(from) + " "
            + releaseReturn.get(from) + " " + (woke == null ? -1 : woke) + " " + acquiredAt.get(to) + " " + overlaps.get();
    }

    @Override
    public void close() {
        closing = true;
        for (Semaphore semaphore : letGo) {
            semaphore.release();
        }
        for (int i = 0; i < threads.size(); i++) {
            if (acquiredAt.get(i) == 0) {         // still waiting in acquire(): it leaves the queue
                threads.get(i).interrupt();
            }
        }
        for (Thread thread : threads) {
            try {
                if (thread.isAlive()) {
                    thread.join(10_000);
                }
            } catch (InterruptedException ignored) {
                break;
            }
        }
        // Each close ends a session (any node left goes with it) and waits for the server's
        // reply: side by side, as one after the other would take minutes for 200 (even side
        // by side, 200 took 13 s on 2 loaded cores).
        List<Thread> closers = new ArrayList<>();
        for (CuratorFramework client : clients) {
            Thread closer = new Thread(client::close, "close-" + closers.size());
            closers.add(closer);
            closer.start();
        }
        for (Thread closer : closers) {
            try {
                closer.join(10_000);
            } catch (InterruptedException ignored) {
                break;
            }
        }
        try {
            reader.delete().deletingChildrenIfNeeded().forPath(path);
        } catch (Exception ignored) {
            // already gone, or a node of a session still closing: the parent is only a name
        }
        FIRED.clear();
    }
}
