package pagewise.peers;

import io.aeron.Aeron;
import io.aeron.ExclusivePublication;
import io.aeron.Subscription;
import io.aeron.driver.MediaDriver;
import io.aeron.driver.ThreadingMode;
import io.aeron.logbuffer.FragmentHandler;
import org.HdrHistogram.Histogram;
import org.agrona.BufferUtil;
import org.agrona.concurrent.SleepingMillisIdleStrategy;
import org.agrona.concurrent.UnsafeBuffer;

/**
 * Aeron IPC round trip, the shape of `pagewise bench queue --rtt`: the ping
 * thread offers a record carrying its sequence number and send time on stream
 * A (an exclusive publication) and busy-spins polling stream B for the echo;
 * the pong thread busy-spins polling A and offers the same bytes on B. One
 * record in flight; the ping side times each round trip with System.nanoTime
 * (CLOCK_MONOTONIC) into an HdrHistogram (3 significant digits) after a
 * warm-up that is not recorded.
 *
 * An embedded media driver (shared threading mode, sleeping 1 ms when idle,
 * so that it does not take a CPU from the two spinning threads: for IPC the
 * driver is not on the data path), term buffers allocated and touched when
 * the publications are made (termBufferSparseFile false). Ping and pong are
 * two threads of this JVM (Aeron's own EmbeddedPingPong does the same), not
 * two processes as in pagewise's harness: IPC goes through the same shared
 * mapped log buffers either way.
 *
 * Usage: AeronRtt RECORD_BYTES ROUND_TRIPS WARMUP
 * Prints: RESULT aeron RECORD_BYTES p50 p90 p99 p99.9 p99.99 max (ns)
 */
public final class AeronRtt {
    private static final String CHANNEL = "aeron:ipc";
    private static final int PING_STREAM = 1001;
    private static final int PONG_STREAM = 1002;

    public static void main(String[] args) throws Exception {
        final int size = Integer.parseInt(args[0]);
        final long roundTrips = Long.parseLong(args[1]);
        final long warmup = Long.parseLong(args[2]);
        if (size < 16) {
            throw new IllegalArgumentException("records must be at least 16 bytes");
        }
        final String dir = "/dev/shm/pagewise-peer-aeron-" + ProcessHandle.current().pid();
        final MediaDriver.Context driverCtx = new MediaDriver.Context()
            .aeronDirectoryName(dir)
            .threadingMode(ThreadingMode.SHARED)
            .sharedIdleStrategy(new SleepingMillisIdleStrategy(1))
            .termBufferSparseFile(false)
            .dirDeleteOnStart(true)
            .dirDeleteOnShutdown(true);
        try (MediaDriver driver = MediaDriver.launchEmbedded(driverCtx);
             Aeron aeron = Aeron.connect(new Aeron.Context().aeronDirectoryName(driver.aeronDirectoryName()));
             ExclusivePublication pingPub = aeron.addExclusivePublication(CHANNEL, PING_STREAM);
             Subscription pingSub = aeron.addSubscription(CHANNEL, PING_STREAM);
             ExclusivePublication pongPub = aeron.addExclusivePublication(CHANNEL, PONG_STREAM);
             Subscription pongSub = aeron.addSubscription(CHANNEL, PONG_STREAM)) {
            while (!pingPub.isConnected() || !pongPub.isConnected()) {
                Thread.onSpinWait();
            }
            final long total = warmup + roundTrips;
            final Thread pong = new Thread(() -> pong(pingSub, pongPub, total), "pong");
            pong.setDaemon(true);
            pong.start();

            final Histogram hist = new Histogram(3_600_000_000_000L, 3);
            final UnsafeBuffer out = new UnsafeBuffer(BufferUtil.allocateDirectAligned(size, 64));
            final long[] echoed = new long[1];
            final FragmentHandler onEcho = (buffer, offset, length, header) -> echoed[0] = buffer.getLong(offset);
            for (long i = 0; i < total; i++) {
                out.putLong(0, i);
                final long sent = System.nanoTime();
                out.putLong(8, sent);
                while (pingPub.offer(out, 0, size) < 0) {
                    Thread.onSpinWait();
                }
                echoed[0] = -1;
                while (pongSub.poll(onEcho, 1) == 0) {
                    Thread.onSpinWait();
                }
                final long received = System.nanoTime();
                if (echoed[0] != i) {
                    throw new IllegalStateException("round trip " + i + " came back as " + echoed[0]);
                }
                if (i >= warmup) {
                    hist.recordValue(Math.max(1, received - sent));
                }
            }
            pong.join();
            System.out.printf("RESULT aeron %d %d %d %d %d %d %d%n", size,
                hist.getValueAtPercentile(50), hist.getValueAtPercentile(90),
                hist.getValueAtPercentile(99), hist.getValueAtPercentile(99.9),
                hist.getValueAtPercentile(99.99), hist.getMaxValue());
        }
    }

    private static void pong(Subscription in, ExclusivePublication out, long total) {
        final FragmentHandler echo = (buffer, offset, length, header) -> {
            while (out.offer(buffer, offset, length) < 0) {
                Thread.onSpinWait();
            }
        };
        for (long i = 0; i < total; i++) {
            while (in.poll(echo, 1) == 0) {
                Thread.onSpinWait();
            }
        }
    }
}
