package pagewise.peers;

import java.io.File;
import java.util.Comparator;
import java.nio.file.Files;
import java.nio.file.Path;
import net.openhft.chronicle.bytes.Bytes;
import net.openhft.chronicle.queue.ChronicleQueue;
import net.openhft.chronicle.queue.ExcerptAppender;
import net.openhft.chronicle.queue.ExcerptTailer;
import net.openhft.chronicle.queue.impl.single.SingleChronicleQueueBuilder;
import org.HdrHistogram.Histogram;

/**
 * Chronicle Queue (open-source edition) round trip, the shape of
 * `pagewise bench queue --rtt`: two queues in /dev/shm; the ping thread
 * appends a record carrying its sequence number and send time to queue A
 * and busy-spins on a tailer of queue B for the echo; the pong thread
 * busy-spins on a tailer of A and appends the same bytes to B. One record in
 * flight; the ping side times each round trip with System.nanoTime
 * (CLOCK_MONOTONIC) into an HdrHistogram (3 significant digits) after a
 * warm-up that is not recorded. Records are written as raw bytes
 * (ExcerptAppender.writeBytes) and read with ExcerptTailer.readBytes.
 * Default queue options (binary wire, daily roll cycle, no pre-toucher: the
 * background pre-toucher is an Enterprise feature). Ping and pong are two
 * threads of this JVM (Chronicle's own latency tests run in one process too).
 *
 * Usage: ChronicleRtt RECORD_BYTES ROUND_TRIPS WARMUP [DIR]
 * Prints: RESULT chronicle RECORD_BYTES p50 p90 p99 p99.9 p99.99 max (ns)
 */
public final class ChronicleRtt {
    public static void main(String[] args) throws Exception {
        final int size = Integer.parseInt(args[0]);
        final long roundTrips = Long.parseLong(args[1]);
        final long warmup = Long.parseLong(args[2]);
        final String base = args.length > 3 ? args[3] : "/dev/shm";
        if (size < 16) {
            throw new IllegalArgumentException("records must be at least 16 bytes");
        }
        final Path dir = Path.of(base, "pagewise-peer-chronicle-" + ProcessHandle.current().pid());
        final long total = warmup + roundTrips;
        try (ChronicleQueue a = SingleChronicleQueueBuilder.binary(dir.resolve("a").toFile()).build();
             ChronicleQueue b = SingleChronicleQueueBuilder.binary(dir.resolve("b").toFile()).build()) {
            final Thread pong = new Thread(() -> pong(a, b, size, total), "pong");
            pong.setDaemon(true);
            pong.start();

            final Histogram hist = new Histogram(3_600_000_000_000L, 3);
            final ExcerptAppender out = a.createAppender();
            final ExcerptTailer in = b.createTailer();
            final Bytes<?> send = Bytes.allocateElasticDirect(size);
            final Bytes<?> echo = Bytes.allocateElasticDirect(size);
            for (long i = 0; i < total; i++) {
                send.clear();
                send.writeLong(i);
                final long sent = System.nanoTime();
                send.writeLong(sent);
                send.writeSkip(size - 16);
                out.writeBytes(send);
                echo.clear();
                while (!in.readBytes(echo)) {
                    Thread.onSpinWait();
                }
                final long received = System.nanoTime();
                final long seq = echo.readLong(0);
                if (seq != i || echo.readRemaining() != size) {
                    throw new IllegalStateException("round trip " + i + " came back as " + seq
                        + " with " + echo.readRemaining() + " bytes");
                }
                if (i >= warmup) {
                    hist.recordValue(Math.max(1, received - sent));
                }
            }
            pong.join();
            System.out.printf("RESULT chronicle %d %d %d %d %d %d %d%n", size,
                hist.getValueAtPercentile(50), hist.getValueAtPercentile(90),
                hist.getValueAtPercentile(99), hist.getValueAtPercentile(99.9),
                hist.getValueAtPercentile(99.99), hist.getMaxValue());
        } finally {
            try (var files = Files.walk(dir)) {
                files.sorted(Comparator.reverseOrder()).map(Path::toFile).forEach(File::delete);
            }
        }
    }

    private static void pong(ChronicleQueue a, ChronicleQueue b, int size, long total) {
        final ExcerptTailer in = a.createTailer();
        final ExcerptAppender out = b.createAppender();
        final Bytes<?> record = Bytes.allocateElasticDirect(size);
        for (long i = 0; i < total; i++) {
            record.clear();
            while (!in.readBytes(record)) {
                Thread.onSpinWait();
            }
            out.writeBytes(record);
        }
        in.close();
        out.close();
    }
}
