from twisted.application.service import ServiceMaker

namesrv = ServiceMaker("twisted-namesrv", "twisted_namesrv.tap", "An Apache RocketMQ NameServer", "namesrv")
