package org.sparkdl.bridge;

import java.io.BufferedInputStream;
import java.io.DataInputStream;
import java.io.EOFException;
import java.io.IOException;
import java.net.StandardProtocolFamily;
import java.net.UnixDomainSocketAddress;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.Channels;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.concurrent.TimeUnit;

import org.apache.spark.SparkEnv;
import org.apache.spark.TaskContext;
import org.apache.spark.rpc.RpcEndpointRef;
import org.apache.spark.rpc.RpcTimeout;
import org.apache.spark.util.RpcUtils;

import scala.concurrent.duration.FiniteDuration;
import scala.reflect.ClassTag$;

/**
 * Executor side of a multi-iteration job ({@link TrainingLoop#run}): the channel between one Python gradient task
 * and the driver's {@link Rendezvous}. A Unix domain socket in a new directory only this user can enter, under the
 * executor's Spark local directory (the
 * Python worker and its executor share the host; nothing listens on the network), served by one daemon thread:
 * per iteration it reads the task's gradient records, sends them to the rendezvous over Spark's RPC and writes the
 * reply back. Closed, with its directory, when the task ends.
 *
 * <pre>
 * Python to JVM, per iteration: int32 n | n x (int32 length | bytes)        (little-endian)
 * JVM to Python: int32 m | m x (int32 length | bytes); the first is the reply header
 *   int32 status (0: run the next iteration, 1: stop, 2: failed, message follows) | int32 epoch |
 *   int32 iteration in epoch | int32 global iteration; then the weights' chunks, or the failure's message
 * </pre>
 */
final class TaskLink implements Runnable {
    static final int CONTINUE = 0;
    static final int STOP = 1;
    static final int FAILED = 2;

    private final String endpoint;
    private final int task;
    private final Path dir;
    private final Path socket;
    private final ServerSocketChannel server;

    private TaskLink(String endpoint, int task) throws IOException {
        this.endpoint = endpoint;
        this.task = task;
        this.dir = newDirectory();
        this.socket = dir.resolve("s");
        dir.toFile().deleteOnExit();  // backstops of the task-end listener, which a killed task may not run
        socket.toFile().deleteOnExit();
        this.server = ServerSocketChannel.open(StandardProtocolFamily.UNIX);
        server.bind(UnixDomainSocketAddress.of(socket));
    }

    /** Socket send buffer asked for: room for a reply's weights (the kernel caps it at net.core.wmem_max). */
    private static final int SEND_BUFFER = 4 << 20;

    /** Longest socket path used (Linux's limit is 107 bytes). */
    private static final int MAX_PATH = 100;

    /**
     * A new owner-only directory for the socket: in the executor's Spark local directory (removed with the
     * application's other temporary files when the executor stops), or in the JVM's temporary directory when that
     * path would be too long for a Unix socket.
     */
    private static Path newDirectory() throws IOException {
        java.nio.file.attribute.FileAttribute<?> owner =
                PosixFilePermissions.asFileAttribute(PosixFilePermissions.fromString("rwx------"));
        Path base = Path.of(org.apache.spark.util.Utils.getLocalDir(SparkEnv.get().conf()));
        if (base.toAbsolutePath().toString().length() + 40 <= MAX_PATH) {
            return Files.createTempDirectory(base, "sparkdl-link-", owner);
        }
        return Files.createTempDirectory("sparkdl-link-", owner);
    }

    /** Open the link of group task {@code task} in the running Spark task; returns the socket's path. */
    static String open(String endpoint, int task) {
        try {
            TaskLink link = new TaskLink(endpoint, task);
            Thread t = new Thread(link, "sparkdl-link-" + task);
            t.setDaemon(true);
            t.start();
            TaskContext tc = TaskContext.get();
            if (tc != null) {
                tc.addTaskCompletionListener((org.apache.spark.util.TaskCompletionListener) c -> link.close());
            }
            return link.socket.toString();
        } catch (IOException e) {
            throw new java.io.UncheckedIOException("sparkdl: could not open the task's iteration link", e);
        }
    }

    @Override
    public void run() {
        try (SocketChannel ch = server.accept()) {
            // the weights go out in one write rather than waiting for Python to read each part, as the task's
            // records come in (task_link.py)
            ch.setOption(java.net.StandardSocketOptions.SO_SNDBUF, SEND_BUFFER);
            DataInputStream in = new DataInputStream(new BufferedInputStream(Channels.newInputStream(ch), 1 << 16));
            SparkEnv env = SparkEnv.get();
            RpcEndpointRef ref = RpcUtils.makeDriverRef(endpoint, env.conf(), env.rpcEnv());
            RpcTimeout wait = new RpcTimeout(new FiniteDuration(365, TimeUnit.DAYS), "sparkdl.rendezvous");
            for (int iteration = 0; ; iteration++) {
                byte[][] records;
                try {
                    records = readFrames(in);
                } catch (EOFException e) {
                    return;  // the task finished (or died)
                }
                byte[][] reply;
                try {
                    reply = ref.askSync(new Rendezvous.Contribution(iteration, task, records), wait,
                            ClassTag$.MODULE$.apply(byte[][].class));
                } catch (RuntimeException e) {
                    reply = failed(e);
                }
                writeFrames(ch, reply);
                if (Frames.wrap(reply[0]).getInt(0) != CONTINUE) {
                    return;
                }
            }
        } catch (IOException e) {
            // the Python side went away: its task fails on its own
        } finally {
            close();
        }
    }

    private static byte[][] failed(Throwable e) {
        Throwable root = e;
        while (root.getCause() != null && root.getCause() != root) {
            root = root.getCause();
        }
        byte[] header = ByteBuffer.allocate(16).order(ByteOrder.LITTLE_ENDIAN).putInt(FAILED).array();
        return new byte[][] {header, String.valueOf(root.getMessage()).getBytes(StandardCharsets.UTF_8)};
    }

    static byte[][] readFrames(DataInputStream in) throws IOException {
        int n = Integer.reverseBytes(in.readInt());
        byte[][] out = new byte[n][];
        for (int i = 0; i < n; i++) {
            out[i] = new byte[Integer.reverseBytes(in.readInt())];
            in.readFully(out[i]);
        }
        return out;
    }

    /** The frames in one gathering write (the Python side wakes once per reply, not once per part). */
    static void writeFrames(SocketChannel ch, byte[][] frames) throws IOException {
        ByteBuffer[] parts = new ByteBuffer[2 * frames.length + 1];
        parts[0] = littleEndianInt(frames.length);
        for (int i = 0; i < frames.length; i++) {
            parts[2 * i + 1] = littleEndianInt(frames[i].length);
            parts[2 * i + 2] = ByteBuffer.wrap(frames[i]);
        }
        long left = 4L * (frames.length + 1);
        for (byte[] f : frames) {
            left += f.length;
        }
        while (left > 0) {
            left -= ch.write(parts);
        }
    }

    private static ByteBuffer littleEndianInt(int v) {
        return ByteBuffer.allocate(4).order(ByteOrder.LITTLE_ENDIAN).putInt(0, v);
    }

    private synchronized void close() {
        try {
            server.close();
            Files.deleteIfExists(socket);
            Files.deleteIfExists(dir);
        } catch (IOException e) {
            // best effort: a temporary directory
        }
    }
}
